// Package queue is the one acquire protocol behind every etcd primitive of
// dlock (lock.Mutex, lock.Semaphore, lock.RWMutex, election.Election):
// entries are keys under one prefix, bound to a session's lease, ordered by
// create revision, granted by a Rule (Exclusive, ExclusiveDelay, Reader,
// Shared). Queue.Acquire enqueues, waits, and returns a Hold, or removes its
// key and returns a cause; Hold.Release deletes the key, guarded by its
// create revision. Callers map the causes (ErrOccupied, ErrEntryGone,
// ErrSessionEnded, ctx's error, etcd's error) to their own errors in one
// function each.
//
// The package imports no public package of dlock: it declares the Session
// it needs, and keeps its lease-bound state (key names, leftovers, epochs,
// live holds) in an attachment of the session (internal/attach), whose
// Heartbeat checks the watched holds' keys and sweeps strays, and whose
// End ends every hold before the session's Done closes.
//
// One file per concept: queue.go, the types and the causes; acquire.go, the
// acquire from top to bottom (enqueue, judge the reads, wait, grant), which
// abandons a failed entry in one place (abandon); enqueue.go, the
// enqueue's Txn, which voids itself (abandon) after an unknown outcome,
// before Acquire sends it again; rules.go, each rule: what its enqueue
// reads and how it judges them, and what it waits on; wait.go, the waits,
// which re-read the queue one way (readAfter); hold.go, a grant's life
// (its place among the session's live holds, its end) and its release
// (leave, remove); state.go, the session's queue state and where a hold's
// loss is noticed (End, checkHolds); names.go, key names, leftovers and
// strays; epochs.go, the epochs that void late writes; plant.go, the fault
// seam's plants (removeHead, overgrant; built with the tag dlock_faults
// only), and plant_off.go, their stand-ins without it.
//
// The design note is docs/queue.md in the repository. The comments of this
// package refer to its sections by name: "Keys", "Key names", "Enqueue",
// "Late writes", "Strays", "Waiting", "Semaphores", "Lock delay", "Holds"
// (the watched holds), "Riding out elections" and "Abandon".
package queue
