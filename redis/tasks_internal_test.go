package redis

import (
	"context"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func goroutinesCreated(t *testing.T) uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	require.Equal(t, metrics.KindUint64, s[0].Value.Kind(), "runtime/metrics has no goroutine creation count")
	return s[0].Value.Uint64()
}

// Tasks one after another run on warm workers, not each on a fresh
// goroutine (whose stack go-redis would grow again), and wait ends the
// warm workers: with workers warm for an hour, wait returns only because
// it tells them to exit.
func TestTasksWarmWorkers(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ts := &tasks{warm: time.Hour}
	const n = 50
	before := goroutinesCreated(t)
	for i := range n {
		done := make(chan struct{})
		ts.goTask(func() { close(done) })
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatalf("task %d did not run", i)
		}
	}
	created := goroutinesCreated(t) - before
	// A fresh goroutine per task would be n; a task that finds no warm
	// worker (the last one has not parked yet) adds one to the pool.
	assert.Less(t, created, uint64(n/2), "goroutines created for %d tasks in a row", n)
	t.Logf("%d tasks in a row: %d goroutines created", n, created)

	require.NoError(t, ts.wait(ctx), "wait with warm workers")
	ts.mu.Lock()
	assert.Zero(t, ts.n, "workers alive after wait")
	ts.mu.Unlock()

	// Still usable after wait, and warm again.
	done := make(chan struct{})
	ts.goTask(func() { close(done) })
	<-done
	require.NoError(t, ts.wait(ctx))
}

// A warm worker that gets no task exits on its own, without a wait.
func TestTasksWorkersCool(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ts := &tasks{warm: time.Millisecond}
	done := make(chan struct{})
	ts.goTask(func() { close(done) })
	<-done
	ts.mu.Lock()
	idle := ts.idle
	ts.mu.Unlock()
	if idle == nil {
		return // already gone
	}
	select {
	case <-idle:
	case <-ctx.Done():
		t.Fatal("the warm worker did not exit on its own")
	}
}

// wait waits for a running task (returning ctx's error if ctx ends
// first), and a task started during a wait runs.
func TestTasksWaitForRunningTask(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ts := &tasks{warm: time.Hour}
	release := make(chan struct{})
	ts.goTask(func() { <-release })
	short, cancelShort := context.WithCancel(ctx)
	cancelShort()
	assert.ErrorIs(t, ts.wait(short), context.Canceled, "wait on a running task with an ended ctx")

	waited := make(chan error, 1)
	go func() { waited <- ts.wait(ctx) }()
	ran := make(chan struct{})
	ts.goTask(func() { close(ran) })
	select {
	case <-ran:
	case <-ctx.Done():
		t.Fatal("a task started during a wait did not run")
	}
	close(release)
	select {
	case err := <-waited:
		assert.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("wait did not return after the tasks ended")
	}
}
