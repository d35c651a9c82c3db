package redis

import (
	"context"
	"runtime/metrics"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func goroutinesCreated(t *testing.T) uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	require.Equal(t, metrics.KindUint64, s[0].Value.Kind(), "runtime/metrics has no goroutine creation count")
	return s[0].Value.Uint64()
}

// unusedClient is a client no test dials: the tasks here only need a key.
func unusedClient(t *testing.T) goredis.UniversalClient {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// warm sets warmFor for one test, while no worker runs (workers read it).
func warm(t *testing.T, d time.Duration) {
	t.Helper()
	set := func(d time.Duration) {
		require.NoError(t, Drain(context.WithoutCancel(t.Context())), "workers of earlier tests")
		warmFor = d
	}
	old := warmFor
	set(d)
	t.Cleanup(func() { set(old) })
}

// Tasks of one client one after another run on warm workers, not each on
// a fresh goroutine (whose stack go-redis would grow again), and Drain
// ends the warm workers: with workers warm for an hour, it returns only
// because it tells them to exit.
func TestWarmWorkers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	warm(t, time.Hour)
	c := unusedClient(t)
	const n = 50
	before := goroutinesCreated(t)
	for i := range n {
		done := make(chan struct{})
		goCounted(c, func() { close(done) })
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatalf("task %d did not run", i)
		}
	}
	created := goroutinesCreated(t) - before
	// A fresh goroutine per task would be n; a task that finds no warm
	// worker (the last one has not parked yet) adds one.
	assert.Less(t, created, uint64(n/2), "goroutines created for %d tasks in a row", n)
	t.Logf("%d tasks in a row: %d goroutines created", n, created)

	require.NoError(t, Drain(ctx, c), "Drain with warm workers")
	counted.Lock()
	assert.Empty(t, counted.on, "no client has workers left after Drain")
	counted.Unlock()

	// Still usable after Drain, and warm again.
	done := make(chan struct{})
	goCounted(c, func() { close(done) })
	<-done
	require.NoError(t, Drain(ctx))
}

// A warm worker that gets no task exits on its own, without a Drain, and
// its client leaves the map.
func TestWorkersCool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	warm(t, time.Millisecond)
	c := unusedClient(t)
	done := make(chan struct{})
	goCounted(c, func() { close(done) })
	<-done
	counted.Lock()
	w := counted.on[c]
	counted.Unlock()
	if w == nil {
		return // already gone
	}
	select {
	case <-w.idle:
	case <-ctx.Done():
		t.Fatal("the warm worker did not exit on its own")
	}
	counted.Lock()
	defer counted.Unlock()
	assert.NotContains(t, counted.on, c)
}

// Drain waits for a running task of its client only (returning ctx's error
// if ctx ends first), and a task started during a Drain runs.
func TestDrainWaitsForItsClient(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	warm(t, time.Hour)
	c, other := unusedClient(t), unusedClient(t)
	release := make(chan struct{})
	goCounted(c, func() { <-release })
	blockOther := make(chan struct{})
	goCounted(other, func() { <-blockOther })
	short, cancelShort := context.WithCancel(ctx)
	cancelShort()
	assert.ErrorIs(t, Drain(short, c), context.Canceled, "Drain on a running task with an ended ctx")

	waited := make(chan error, 1)
	go func() { waited <- Drain(ctx, c) }()
	ran := make(chan struct{})
	goCounted(c, func() { close(ran) })
	select {
	case <-ran:
	case <-ctx.Done():
		t.Fatal("a task started during a Drain did not run")
	}
	close(release)
	select {
	case err := <-waited:
		assert.NoError(t, err, "Drain(c) returns with other's task still running")
	case <-ctx.Done():
		t.Fatal("Drain did not return after its client's tasks ended")
	}
	close(blockOther)
	require.NoError(t, Drain(ctx))
}
