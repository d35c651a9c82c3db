package obs

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// provider is a MeterProvider the test can watch being collected.
type provider struct {
	noop.MeterProvider
	_ [64]byte // not a zero-size allocation
}

// The telemetry of an owner keeps its MeterProvider alive only as long as
// the owner: nothing at package level pins it (a cache keyed by provider
// grew with every provider a process passed, and kept each forever).
func TestProviderNotPinned(t *testing.T) {
	collected := make(chan struct{})
	func() {
		mp := &provider{}
		runtime.AddCleanup(mp, func(struct{}) { close(collected) }, struct{}{})
		New(Config{MeterProvider: mp}, "etcd").Held("x", 1)
		NewGuard(Config{MeterProvider: mp}, "memory", errors.New("stale")).Rejected(t.Context())
	}()
	deadline := time.After(10 * time.Second)
	for {
		runtime.GC()
		select {
		case <-collected:
			return
		case <-deadline:
			t.Fatal("the MeterProvider is still reachable after its owners are gone")
		case <-time.After(10 * time.Millisecond): // a GC cycle's cleanups run on their own goroutine
		}
	}
}

// Span names come from the op, without per-call state.
func TestSpanName(t *testing.T) {
	for op, want := range map[string]string{"lock": "dlock.lock", "try lock": "dlock.try_lock", "try rlock": "dlock.try_rlock", "extend it": "dlock.extend_it"} {
		if got := spanName(op); got != want {
			t.Errorf("spanName(%q) = %q, want %q", op, got, want)
		}
	}
}
