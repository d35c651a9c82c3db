package locktest_test

import (
	"testing"

	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/lock/locktest"
)

// Example shows a backend's conformance test; it needs a *testing.T, so it
// has no output.
func Example() {
	_ = func(t *testing.T) {
		s := newMemService() // a real backend starts its server here
		locktest.Run(t, locktest.Backend{
			New:  func(t *testing.T, name string) lock.Locker { return &memLocker{s: s, name: name} },
			Lose: func(t *testing.T, h lock.Held) { h.(*memHeld).forget(lock.ErrLockLost) },
		})
	}
}
