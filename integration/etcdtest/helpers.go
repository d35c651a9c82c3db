package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/session"
)

// Test helpers shared by dlock's test packages (and usable by users'):
// each takes a testing.TB, fails it on error, and cleans up with
// t.Cleanup, bounded.

// TestTimeout bounds the context Context returns.
const TestTimeout = 60 * time.Second

// CloseTimeout bounds the Close of a session at cleanup (its client may be
// cut off by a fault proxy by then).
const CloseTimeout = 5 * time.Second

// Context returns t's context bounded by TestTimeout.
func Context(t testing.TB) context.Context {
	return ContextFor(t, TestTimeout)
}

// ContextFor returns t's context bounded by d.
func ContextFor(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// Session starts a session on cli and closes it at cleanup, within
// CloseTimeout.
func Session(t testing.TB, cli *clientv3.Client, opts ...session.Option) *session.Session {
	t.Helper()
	s, err := session.New(Context(t), cli, opts...)
	if err != nil {
		t.Fatalf("etcdtest: session: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), CloseTimeout)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

// KeyCount returns the number of keys under prefix.
func KeyCount(t testing.TB, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	resp, err := cli.Get(Context(t), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("etcdtest: count %q: %v", prefix, err)
	}
	return resp.Count
}

// WatchPuts returns a watch of the puts under prefix from now on: with
// WaitPuts, a way to wait until n waiters are queued without sleeping.
func WatchPuts(t testing.TB, cli *clientv3.Client, prefix string) clientv3.WatchChan {
	t.Helper()
	ctx := Context(t)
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("etcdtest: watch %q: %v", prefix, err)
	}
	return cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithRev(resp.Header.Revision+1))
}

// WaitPuts waits for n put events on w.
func WaitPuts(t testing.TB, w clientv3.WatchChan, n int) {
	t.Helper()
	for n > 0 {
		wr, ok := <-w
		if !ok {
			t.Fatalf("etcdtest: watch closed with %d puts to go", n)
		}
		if err := wr.Err(); err != nil {
			t.Fatalf("etcdtest: watch: %v", err)
		}
		n -= len(wr.Events)
	}
}
