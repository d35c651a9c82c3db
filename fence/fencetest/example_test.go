package fencetest_test

import (
	"testing"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/fencetest"
)

// Example shows a guard's conformance test; it needs a *testing.T, so it has
// no output. A guard backed by a server gives each New its own table or key
// prefix on one server.
func Example() {
	_ = func(t *testing.T) {
		fencetest.Run(t, fencetest.Config{
			New: func(t *testing.T) fence.Guard { return fence.NewMemoryGuard() },
			Highest: func(t *testing.T, g fence.Guard, name string) uint64 {
				return g.(*fence.MemoryGuard).Highest(name)
			},
		})
	}
}
