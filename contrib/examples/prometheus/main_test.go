package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestScrape runs the example (embedded etcd) on a free loopback port,
// scrapes /metrics until dlock's acquire histogram and held gauge are
// there, with their backend and outcome labels, then stops it: run returns
// nil once its workers, server and etcd are down.
func TestScrape(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	addrs := make(chan string, 1)
	var stderr syncWriter
	done := make(chan error, 1)
	go func() {
		done <- run(rctx, []string{"--addr", "127.0.0.1:0", "--workers", "3", "--locks", "1", "--hold", "5ms"}, &stderr,
			func(addr string) { addrs <- addr })
	}()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		require.FailNow(t, "run returned before serving", "%v\n%s", err, stderr.String())
	case <-ctx.Done():
		require.FailNow(t, "not serving within the test's deadline", stderr.String())
	}

	want := []string{
		`dlock_acquire_duration_seconds_count{dlock_backend="etcd",dlock_outcome="granted"`,
		`dlock_acquire_duration_seconds_bucket{dlock_backend="etcd",dlock_outcome="granted"`,
		`dlock_held{dlock_backend="etcd"`,
	}
	// The series appear with the first grant: scrape until they do (or
	// 30s pass).
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var body string
	for {
		body = scrape(sctx, t, "http://"+addr+"/metrics")
		if containsAll(body, want) || sctx.Err() != nil {
			break
		}
		select {
		case <-tick.C:
		case <-sctx.Done():
		}
	}
	for _, w := range want {
		assert.Contains(t, body, w)
	}
	assert.Contains(t, body, "# TYPE dlock_held gauge")
	assert.Contains(t, body, "# TYPE dlock_acquire_duration_seconds histogram")

	stop()
	select {
	case err := <-done:
		assert.NoError(t, err, stderr.String())
	case <-ctx.Done():
		require.FailNow(t, "run did not return after its ctx ended", stderr.String())
	}
}

// TestBadFlags: run rejects bad flags and arguments without starting
// anything.
func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--workers", "0"}, {"--nope"}, {"extra"}, {"--locks", "-1"}} {
		var stderr syncWriter
		err := run(t.Context(), args, &stderr, func(string) { t.Errorf("%v: served", args) })
		assert.Error(t, err, "%v", args)
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// scrape returns the body of a GET of url, or "" if it failed.
func scrape(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Close = true // no idle connection left behind
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(b)
}

// syncWriter is a goroutine-safe io.Writer.
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
