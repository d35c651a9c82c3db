// Package queue is the one acquire protocol behind every etcd primitive of
// dlock (lock.Mutex, lock.Semaphore, lock.RWMutex, election.Election):
// entries are keys under one prefix, bound to a session's lease, ordered by
// create revision, granted by a Rule. Queue.Acquire enqueues, waits, and
// returns a Hold, or removes its key and returns a cause; Hold.Release
// deletes the key, guarded by its create revision. Callers map the causes
// (ErrOccupied, ErrEntryGone, ErrSessionEnded, ctx's error, etcd's error)
// to their own errors in one function each.
//
// This comment is the design note for the protocol: what etcd does that it
// relies on, and why each step is as it is.
//
// # Keys
//
// An entry's key is "<root>/<name>/<lease>-<slot>": the queue prefix (see
// PrefixFor), the session's lease in hex, and a slot number unique among
// the session's live attempts. A "/" in the name is written "%2F", and
// names never contain "%", so the queue of "a" does not range over the
// keys of "a/b". Side keys of a queue (the epoch keys below) live beside
// the prefix, at "<root>/<name>%epoch/<lease>", inside no queue.
//
// # Key names and etcd tombstones
//
// etcd keeps a deleted key in its index until the next compaction, and a
// range over the queue's prefix walks every such key. A fresh key name per
// attempt would make every acquire slower than the last until compaction
// (measured: lock+unlock went from 1.27x to 1.48x etcd's Mutex over 1000
// iterations). So an attempt's key name is reused once the attempt is
// over: sequential attempts of one session reuse one name, concurrent ones
// get distinct names. Reuse is safe because every check and delete of an
// entry is guarded by its create revision, never by its name alone. The
// names, the leftovers and the epochs are the session's state (state.go),
// kept in the session's local.Store: it ends with the Session value, and
// two sessions with one lease ID (on two clusters) never share it.
//
// # Enqueue
//
// One Txn: compare that the key name is free and that the session's epoch
// key for the queue is unmoved; then the rule's reads (for Exclusive, the
// last entry created before ours: our predecessor) and the put. A try
// acquire adds the rule's "free" compare (for Exclusive: no key under the
// prefix) and, in the Else branch, reads why it failed; so a TryLock is
// one round trip and creates nothing when the lock is taken.
//
// # Late writes
//
// A request that failed with an unknown outcome (a timeout) can still be
// applied after the acquire gave up and deleted its key: a member paused
// with the request in hand forwards it when it resumes, and etcd's client
// sends a Txn again when it gets DeadlineExceeded while the caller's
// context lives (retry_interceptor.go: isContextError → continue). An
// enqueue applied that late would leave an entry bound to the still-live
// session that nobody waits on: it would hold the queue for every client
// until the session ends. The fault suite found this as a stall.
//
// So every enqueue also compares the mod revision of the session's epoch
// key for the queue, and the cleanup after an unknown outcome puts that key
// and deletes the entry in one Txn: an enqueue applied before the cleanup
// is deleted by it, one applied after fails its compare. If that cleanup
// fails too, the queue is marked dirty and the session's next enqueue
// moves the epoch first. A key of the session's own under a name it is
// about to use (an enqueue sent twice) fails the name compare; the enqueue
// then deletes it, guarded by its create revision, and tries again. The
// failure is read in a second request rather than an Else branch on every
// enqueue (an Else branch cost ~6% uncontended, the compare alone ~2%).
//
// The epoch cannot void a copy of an enqueue that succeeded: etcd's client
// sent the Txn again after a timeout, the caller saw the second copy
// succeed, and the first, held by a paused member, lands after the
// attempt's Release, when the name is free again and the epoch unmoved.
// The model in model/ found this stall. So at each heartbeat the session
// lists the keys bound to its lease (the same request that checks watched
// holds) and deletes those under names no attempt holds (state.removeStrays):
// whatever wrote such a key, nobody waits on it. A stray lives at most one
// heartbeat interval.
//
// # Waiting
//
// An Exclusive waiter watches only its immediate predecessor's key, so one
// release wakes one waiter. It watches from now: a watch from a revision
// above the store's current one goes straight into etcd's synced watcher
// group, where a watch from an older revision lands in the unsynced
// group, which a loop catches up every 100ms (a handoff within 100ms of
// queueing cost up to that much: ~95ms instead of 0.8ms). If the watch's
// created notice shows that writes came after the waiter's own enqueue,
// the deletion may be among them, and one linearizable read of the
// predecessor's key tells (it is gone, or another key now has its name).
// Measured with 2 contenders looping, where the predecessor is often
// released before the watch starts: 0.74-0.93 ms per grant, against
// 5.4-7.7 ms with a second watch from the enqueue's revision.
//
// After the deletion the waiter re-reads, in one range, the queue's last
// two entries created at or before its own: itself, then its new
// predecessor (check). That read is serializable: it skips the leader
// round trip of a linearizable read, the larger part of a handoff after
// the event. It is safe once the read's revision r is at least the
// deletion's: entries created before ours never reappear (every new key
// gets a later revision), so an earlier entry that exists now existed at r
// too, and "no predecessor at r" means none now; our own key, if present at
// r, may be deleted just after the read either way, which the hold's watch
// and the session's deadline report. A read served below the deletion's
// revision (by a lagging member, or a moment before the store's revision
// moves: etcd's watchableStoreTxnWrite.End notifies watchers before
// TxnWrite.End) is repeated linearizably, as is the read after a watch that
// broke without an event.
//
// Every request and watch of an acquire runs under a context that is also
// cancelled when the session ends, so a waiter stops the moment its
// session's Done closes, even while etcd is unreachable (the watch may be
// broken then, and a plain ctx would hang).
//
// # Semaphores
//
// A semaphore's waiter (Shared) is granted when fewer than n entries
// precede it. Its enqueue reads that count in the same Txn; then one watch
// on the whole prefix, with previous values, lowers the count for each
// deletion of an older entry, so a release makes only the waiter it grants
// issue a request (checkShared, to confirm). The watch starts from now
// (synced); if writes came since the count, the waiter counts again once
// and skips the watch's deletions up to that read's revision. Measured
// with 8 contenders on 2 permits: 0.56-0.58 ms per grant, against
// 9.3-9.9 ms with a second watch from the past revision.
//
// # Holds
//
// A Hold ends in the session's AfterDone hook, synchronously, before the
// session's own Done closes; so a grant's Done is never later than its
// session's. It also ends when a watch on its key (started by the first
// Done call) sees the key deleted; a deletion seen while Release's own
// delete is in flight is left for Release to judge. Release is a delete
// guarded by the create revision: a stale or retried Release never deletes
// a later entry (etcd issue #22082 is the counter-example).
//
// # Abandon
//
// A cancelled or failed acquire deletes its key with a context detached
// from the caller's and bounded by cleanup.Timeout. If that delete fails,
// the key is a leftover: its name is retired and the session's next
// enqueue deletes it first. If the session has ended, nothing is sent: the
// key goes with the lease.
package queue
