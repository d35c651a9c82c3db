// Package leaktest is goleak.VerifyTestMain for the packages whose tests
// use go-redis against nodes that refuse connections: after 5 failed
// dials a go-redis pool probes the address from a goroutine of its own
// that sleeps a second between probes and sees the pool's Close only
// after its sleep. VerifyTestMain gives such goroutines 3 seconds to end;
// a goroutine that lives longer is a leak, reported as goleak reports it.
package leaktest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// VerifyTestMain runs m's tests and, if they pass, fails the run when a
// goroutine is still alive 3 seconds later.
func VerifyTestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := settled(3 * time.Second); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// settled returns nil once goleak finds no extra goroutine, or its last
// finding after wait.
func settled(wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
