// Package election is leader election on etcd, on the same ordered queue
// of keys as package lock: each candidate puts a key under
// "<prefix>/<name>/", bound to its session's lease; the first key by
// create revision is the leader, and every other candidate watches only
// its immediate predecessor. Use Campaign and the returned Term directly,
// or Run, which campaigns, calls back when elected, cancels the callback's
// context at step-down and can campaign again on a fresh session.
//
// # Guarantee
//
// At any revision of the etcd store there is at most one leader; its epoch
// (the create revision of its key, Term.Token's Seq) is strictly greater
// than every earlier leader's. A leader's Term.Done closes at its session's
// local deadline, before the server can expire its lease and elect the next
// candidate. Observers see every change of leader, and every "no leader",
// in order, never going back to an older epoch.
//
// # Limit
//
// An elected leader is not guaranteed to be the only one acting. A process
// can pause (GC, swap, SIGSTOP) or lose the network right after it checked
// Done, and carry on after its successor was elected. Like client-go's
// leaderelection, this package does not fence by itself: pass Term.Token
// to the resource, which rejects a token older than one it has seen
// (package fence), or make etcd writes conditional on Term.IsLeader.
//
// # Caveats
//
//   - A leader cut off from etcd steps down first; a new leader is elected
//     only once the server expires the old lease, so a failover takes up
//     to the session TTL. There is a gap with no leader, never two in
//     etcd's view.
//   - Observe may skip intermediate states when its reader is slow: it
//     always delivers the latest state, never an older leader after a
//     newer one.
//   - Epochs are etcd revisions: they increase across leaders but not by
//     one, and are comparable only within one etcd cluster.
//   - Names follow lock.ValidateName; a lock and an election of the same
//     name do not collide (different prefixes).
//   - Several Campaign calls on one session are independent candidates:
//     the second waits for the first to resign, as any other candidate.
package election
