// Package lock defines the backend-neutral lock interfaces ([Locker],
// [Held]) and implements them on etcd: [Mutex], [RWMutex] and
// [Semaphore], all on one queue of keys per name. [Do] and [DoAll] run
// work under one lock or several; [LockAll] takes several locks without
// deadlock.
//
// # Guarantee
//
// A Mutex is a queue of keys under "<prefix>/<name>/" (a "/" in the name
// is written "%2F", so that nested names are separate queues), each bound to a
// [session.Session]'s lease and ordered by create revision. The first key
// holds the lock; every waiter watches only its immediate predecessor, so a
// release wakes exactly one waiter, and waiters are granted in FIFO order of
// arrival. Within etcd, two grants of one lock never overlap: a grant ends
// only when its key is deleted (Unlock, or the lease's expiry), and a waiter
// is granted only after reading, in one request at a revision at or after
// its predecessor's deletion, that no earlier key exists and that its own
// still does (earlier keys never reappear, so that read is final).
//
// Each grant's fencing token ([Held.Token]) is its key's create revision:
// successive holders of one lock get strictly increasing tokens, across
// leader changes and member loss (it is the cluster's revision).
//
// A holder learns it may have lost the lock no later than anyone else can
// be granted it: Held.Done closes at the session's local deadline (the send
// time of the last acknowledged keepalive + TTL − safety margin, on the
// monotonic clock), which comes before the server can expire the lease. It
// also closes when the grant's key is found deleted by someone else: the
// session checks the keys of the grants whose Done was called at each
// heartbeat (one request per interval for all of them, no watch or
// goroutine per grant), so such a deletion is reported within one
// heartbeat interval (TTL/3 by default).
//
// An [RWMutex] keeps readers and writers in one FIFO queue: a writer's
// token fences like a Mutex's; readers share. A [Semaphore] grants up to N
// permits in FIFO order; its tokens order permits but do not exclude.
// [WithLockDelay] makes a Mutex wait, after a grant ended without Unlock,
// before granting again (a bound on a paused holder's overlap where the
// resource cannot check a token).
//
// Locks are built on a [session.Source]: a *session.Session (grants share
// its lease and end with it; once it ended, Lock fails with
// ErrSessionDone) or a *session.Manager (the next Lock after a session
// ended runs on a fresh one).
//
// # Several locks at once
//
// [LockAll] takes several locks, all or nothing, one at a time in one
// global order (the order of each Locker's LockKey: see LockAll), so that
// callers whose sets overlap never deadlock, whatever order each passes
// them in; on failure or ctx end it releases what it took. [DoAll] runs a
// function under all of them, with a context that ends when any of them
// may be lost. Only exclusive Lockers take part: a Semaphore's permit and
// an RWMutex's read side are not Lockers; take them outside LockAll, in
// the same order in every process.
//
// Each grant keeps its own token, and tokens of different locks are not
// comparable: fence each resource with the token of the lock that guards
// it. A write that spans two locks' resources (a transfer between two
// accounts) must be admitted under both tokens in one atomic step at the
// store: in one database transaction, admit each token (pgfence's
// AdmitTx, once per token) and write, so that it commits only if neither
// grant has been superseded. Across two stores there is no such step: each
// store fences its own part, and the application must tolerate one part
// landing without the other (an idempotent, retried transfer).
//
// The locks may come from different backends (an etcd Mutex and a Redis
// Mutex in one call): keys start with the backend, so the order stays
// global. Each grant keeps its backend's guarantees, so the set is as
// strong as its weakest member: a Redlock grant carries no token, a Redis
// grant ends with its TTL (give Redis locks in a LockAll auto-extension,
// or an earlier one may run out while a later one is awaited, and LockAll
// fails with ErrLockLost).
//
// # Limits
//
// No lock service can stop a holder that is paused (GC, SIGSTOP, a stalled
// VM) between checking Done and acting: it wakes up after its grant ended
// and acts anyway. Exclusion at the resource comes only from the resource
// checking the token (package fence). Use [Do] to get a context that ends
// with the grant, and pass [Held.Token] with every write.
//
// The local deadline assumes that this host's monotonic clock and the etcd
// leader's do not drift apart by more than the safety margin within one TTL.
//
// # Caveats
//
//   - Every request rides out an etcd leader election within its ctx: it
//     asks for a leader (a member without one refuses at once) and is sent
//     again after a refusal, a server timeout, or an attempt of its own
//     that got no answer within a second (a request forwarded to a leader
//     that just died is never answered). Lock returns an error, and
//     removes its key, on other etcd errors and when ctx ends; retry in the
//     caller if waiting through a longer outage is wanted. An enqueue whose
//     outcome was unknown (a timeout) and that etcd applies later leaves
//     no key: every enqueue compares the session's epoch key for the lock
//     ("<prefix>/<name>%epoch/<lease>", bound to the lease), which the
//     cleanup of the failed attempt moves before it is sent again.
//   - An Unlock whose delete was applied but whose reply was lost (in an
//     election) sends it again, finds the key gone, and reports
//     ErrLockLost: a loss it cannot tell from its own release. It errs
//     toward reporting a loss, never toward hiding one.
//     A key of the session's own under a name it is about to use (an
//     enqueue that etcd's client sent twice) is deleted, not queued behind.
//   - A key deleted by hand (not by the lease's end) is reported by
//     Held.Done within one heartbeat interval, not at once.
//   - Use one kind of lock per name: a Mutex and an RWMutex of one name
//     share the queue (the Mutex acts as a writer), a Semaphore refuses a
//     queue made by another kind (ErrPermitsMismatch).
//   - Every Lock or TryLock call is an independent grant, even on one Mutex
//     or one session (unlike etcd's concurrency.Mutex, whose two Mutexes on
//     one session both "hold" the lock).
//   - When the session ends, every lock it holds is lost at once. Use one
//     session per process, not one per lock, and watch Held.Done.
//   - A session's key names are reused once an attempt is over, so that a
//     busy lock does not leave a tombstone per acquire in etcd's index until
//     the next compaction; every check and delete is guarded by the create
//     revision, never by the name alone.
//   - LockAll's order prevents deadlock among LockAll callers and callers
//     of single locks. Code that takes two locks itself, one Lock after
//     the other, can still deadlock with it: take every set through
//     LockAll.
//   - A lock key names the lock within its backend, not the cluster: two
//     etcd clusters (or two Redis servers) with the same prefix and name
//     look like one lock to LockAll, which refuses them; give them
//     distinct prefixes.
//   - Tokens of different locks are not comparable; tokens of one lock are
//     comparable across the lock's whole life on one etcd cluster (a restore
//     from backup or a new cluster starts revisions anew).
package lock
