// Package locktest is the conformance suite that every lock.Locker backend
// of this module passes, in the spirit of testing/fstest: describe the
// backend in a [Backend] and call [Run] from a test.
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
// relocking, Capabilities that agree with the tokens, and rejection of bad
// names and bad constructor input.
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
package locktest
