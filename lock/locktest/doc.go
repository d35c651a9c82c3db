// Package locktest is the conformance suite that every lock.Locker backend
// of this module passes, in the spirit of testing/fstest: describe the
// backend in a [Backend] and call [Run] from a test. Beside it, as fstest
// has MapFS beside TestFS, [Memory] is an in-memory lock service for the
// tests of code that takes a lock.Locker.
//
//	func TestConformance(t *testing.T) {
//		locktest.Run(t, locktest.Backend{
//			New:  func(t *testing.T, name string) lock.Locker { ... },
//			Lose: func(t *testing.T, h lock.Held) { ... },
//		})
//	}
//
// The suite checks what every backend promises, and only that: mutual
// exclusion under contention (with strictly increasing tokens admitted by a
// fence.MemoryGuard when the backend declares fencing tokens), TryLock,
// cancellation while waiting (the ctx's error, nothing left behind), Done
// and ErrLockLost after the lock service forgot a grant, idempotent Unlock,
// relocking, tokens that are all fencing tokens or all Seq 0, and rejection of bad
// names and bad constructor input.
//
// # Testing code that takes a lock
//
// Give the code under test a Locker of a [Memory]: it behaves like the
// etcd Mutex (FIFO, strictly increasing tokens, the same errors), in the
// process, with no server. [Memory.Lose] ends the current grant as a loss
// whenever the test says so (its Done closes, its Err matches
// lock.ErrLockLost, the next grant gets a higher token), so a test can
// check that work done after a loss is stopped or fenced: see the
// package example. To make the code under test wait, or its TryLock fail,
// hold the lock from the test through another Locker of the same name;
// [Memory.Waiting] says when it queued, [Memory.Holder] which token holds
// the lock, or that the code released it.
//
// A Memory checks the code's use of a lock, not the lock: it has no
// session, TTL or pause, and a grant ends only by Unlock or Lose. Test the
// deployment's own behaviour against the real backend.
//
// # Caveats
//
//   - Every wait is bounded by Backend.Timeout, and no check depends on
//     timing; but DoneOnLoss waits for the backend to notice the loss, which
//     for a TTL backend takes up to one TTL: give such a backend a short TTL
//     (or a watchdog) in the test.
//   - The suite cannot prove exclusion, only fail to find a violation: it
//     runs a few goroutines on a few handles.
//   - The suite uses t.Context, so it must run in Go 1.24 or later.
//   - A Memory lives in one process: Lockers of two Memories never
//     contend, nor do two processes' (there is nothing to share).
package locktest
