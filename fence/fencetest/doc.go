// Package fencetest is the conformance suite that every fence.Guard of this
// module passes, in the spirit of testing/fstest: describe the guard in a
// [Config] and call [Run] from a test.
//
//	func TestConformance(t *testing.T) {
//		fencetest.Run(t, fencetest.Config{
//			New:     func(t *testing.T) fence.Guard { ... },
//			Highest: func(t *testing.T, g fence.Guard, name string) uint64 { ... },
//		})
//	}
//
// The suite checks what the fence.Guard contract promises, and only that: a
// first token is admitted, an equal one again, a lower one is rejected with
// fence.ErrStaleToken (and, when the guard returns a *fence.StaleTokenError,
// with the right numbers in it and in its message) without lowering the
// mark; names are independent; Seq 0 and an empty Name are rejected with
// fence.ErrNoToken and fence.ErrInvalidToken; a cancelled ctx admits
// nothing; Seq is ordered as a number and kept exactly up to 1<<64-1 (no
// float64 or int64 on the way); and under [Workers] goroutines admitting
// interleaved tokens, no token is admitted once a higher one was, every
// rejection names a higher mark, and the stored mark never decreases.
//
// [Interleave] runs the same concurrent load through a backend's own guarded
// write (a transaction, a script), for the backend's own tests.
//
// # Caveats
//
//   - The suite cannot prove that a guard is atomic, only fail to find a
//     violation: it runs [Workers] goroutines on one name.
//   - Config.Highest must read what Admit wrote (the guard's own storage, not
//     a lagging replica), or the monitor reports a decrease that is not one.
//   - Every wait is bounded by Config.Timeout, and no check depends on
//     timing.
//   - The suite uses t.Context, so it must run in Go 1.24 or later.
package fencetest
