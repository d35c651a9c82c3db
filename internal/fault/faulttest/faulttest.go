//go:build dlock_faults

// Package faulttest sets internal/fault's environment from a test.
package faulttest

import (
	"testing"

	"github.com/dlock-go/dlock/internal/fault"
)

// Set sets the seam's clock rate and plants (DLOCK_CLOCK_RATE,
// DLOCK_PLANT) for the test and reloads them; both are restored at
// cleanup.
func Set(t testing.TB, rate, plants string) {
	t.Helper()
	t.Cleanup(func() { // runs after Setenv's restores
		if err := fault.Reload(); err != nil {
			t.Errorf("fault.Reload: %v", err)
		}
	})
	t.Setenv(fault.RateEnv, rate)
	t.Setenv(fault.PlantEnv, plants)
	if err := fault.Reload(); err != nil {
		t.Fatalf("fault.Reload: %v", err)
	}
}
