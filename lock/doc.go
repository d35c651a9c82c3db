// Package lock defines the backend-neutral lock interfaces ([Locker],
// [Held]) and implements them on etcd: [Mutex], [RWMutex] and [Semaphore],
// on one queue of keys per name, bound to a session's lease and ordered by
// create revision. [Do] and [DoAll] run work under one lock or several;
// [LockAll] takes several locks, all or nothing, without deadlock.
//
// # Guarantee
//
// Within etcd, two grants of one Mutex never overlap: a grant ends only
// when its key is deleted (Unlock, or the lease's end), and a waiter is
// granted only once no earlier key exists and its own still does. Waiters
// are granted in FIFO order; a release wakes only the next one. Each
// grant's fencing token ([Held.Token]) is its key's create revision:
// successive holders get strictly increasing tokens, across leader changes
// and member loss. Held.Done closes no later than anyone else can be
// granted the lock (at the session's local deadline, see package session),
// and within one heartbeat interval of its key being deleted by someone
// else. Unlock is guarded by the create revision: it never deletes a later
// holder's key.
//
// # Limit
//
// No lock service can stop a holder that pauses (GC, SIGSTOP, a stalled VM)
// between checking Done and acting: it wakes after its grant ended and acts
// anyway. Only a resource that checks the token prevents that (package
// fence): use [Do], and pass [Held.Token] with every write. The local
// deadline assumes this host's and the etcd leader's monotonic clocks agree
// on one TTL to within the session's safety margin.
//
// # Caveats
//
//   - Every Lock call is an independent grant, even on one Mutex or one
//     session. When a *session.Session ends, every lock on it is lost at
//     once and later Locks fail with ErrSessionDone; on a
//     *session.Manager the next Lock runs on a fresh session.
//   - Requests ride out an etcd leader election within their ctx; on other
//     etcd errors, and when ctx ends, Lock returns an error and removes its
//     key. An Unlock whose reply was lost may report ErrLockLost for its own
//     release: it errs toward reporting a loss, never toward hiding one.
//   - One kind of lock per name: a Mutex of an RWMutex's name is one more
//     writer; a Semaphore refuses another kind's queue (ErrPermitsMismatch).
//     Semaphore and RWMutex reader tokens order grants but do not exclude.
//   - [WithLockDelay] bounds a paused holder's overlap only if its pause is
//     shorter than the delay.
//   - LockAll prevents deadlock only among callers that take every set
//     through it. Tokens of different locks are not comparable, and tokens
//     of one lock only within one etcd cluster's life (not across a restore
//     from backup): a write that spans two locks' resources must be
//     admitted under both tokens in one atomic step at the store.
//
// Design notes: docs/locks.md and docs/queue.md in the repository.
package lock
