// Package testsuite holds what the conformance suites (fence/fencetest,
// lock/locktest) share: the bound on their waits, and an atomic maximum
// for their concurrency checks.
package testsuite

import (
	"cmp"
	"context"
	"testing"
	"time"
)

// DefaultTimeout bounds every wait of a suite whose configuration leaves
// its Timeout zero.
const DefaultTimeout = 30 * time.Second

// Timeout returns d, the bound a suite was given, or DefaultTimeout if d
// is not positive.
func Timeout(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultTimeout
	}
	return d
}

// Context returns a context of t's that ends after d, cancelled at t's
// cleanup.
func Context(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// Raise raises v (an atomic.Int32, atomic.Uint64, ...) to x if x is
// higher.
func Raise[T cmp.Ordered](v interface {
	Load() T
	CompareAndSwap(old, new T) bool
}, x T) {
	for {
		cur := v.Load()
		if x <= cur || v.CompareAndSwap(cur, x) {
			return
		}
	}
}
