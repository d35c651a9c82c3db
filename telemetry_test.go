package dlock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/integration/oteltest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

// metrics reads what a ManualReader has collected.
type metrics struct {
	t *testing.T
	r *sdkmetric.ManualReader
}

// point returns the value of the data point of instrument name whose
// attributes are exactly attrs, and whether there is one.
func (m metrics) point(name string, attrs ...attribute.KeyValue) (float64, bool) {
	return oteltest.Point(m.t, m.r, name, attrs...)
}

func (m metrics) assert(name string, want float64, attrs ...attribute.KeyValue) {
	m.t.Helper()
	got, ok := m.point(name, attrs...)
	if assert.True(m.t, ok, "%s%v: no data point", name, attrs) {
		assert.Equal(m.t, want, got, "%s%v", name, attrs)
	}
}

// await is assert for a point recorded by another goroutine just after
// the Done the test waited on closed (a session's or a grant's end is
// counted and logged after its Done closes, so that nothing delays Done);
// nothing announces the record, so it polls, for 10 s at most.
func (m metrics) await(name string, want float64, attrs ...attribute.KeyValue) {
	m.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got, ok := m.point(name, attrs...); ok && got == want {
			break
		}
	}
	m.assert(name, want, attrs...)
}

func newMetrics(t *testing.T) (metrics, *sdkmetric.MeterProvider) {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	return metrics{t: t, r: r}, mp
}

var (
	etcdAttr = attribute.String("dlock.backend", "etcd")
	outcome  = func(o string) attribute.KeyValue { return attribute.String("dlock.outcome", o) }
	cause    = func(c string) attribute.KeyValue { return attribute.String("dlock.cause", c) }
)

// Every etcd instrument appears with its attributes after the events that
// drive it; a span per acquire carries the outcome, the token, the wait
// and the entries ahead; a session loss is a WARN log record.
func TestTelemetryEtcd(t *testing.T) {
	t.Parallel()
	m, mp := newMetrics(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())
	var logs syncBuffer
	c := etcdtest.New(t)
	ctx := etcdtest.Context(t)
	client, err := dlock.Open(ctx, dlock.Config{
		Backend: dlock.BackendEtcd, Endpoints: c.HostPorts(), Prefix: "tel",
		MeterProvider: mp, TracerProvider: tp,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	require.NoError(t, err)
	defer client.Close(ctx)
	l, err := client.Locker("orders")
	require.NoError(t, err)

	h, err := l.Lock(ctx)
	require.NoError(t, err)
	m.assert("dlock.acquire.duration", 1, etcdAttr, outcome("granted"))
	m.assert("dlock.held", 1, etcdAttr)
	_, err = l.TryLock(ctx)
	require.ErrorIs(t, err, lock.ErrLocked)
	m.assert("dlock.acquire.duration", 1, etcdAttr, outcome("locked"))
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = l.Lock(wctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	m.assert("dlock.acquire.duration", 1, etcdAttr, outcome("canceled"))

	el, err := client.Election("leader")
	require.NoError(t, err)
	term, err := el.Campaign(ctx, "me")
	require.NoError(t, err)
	m.assert("dlock.election.leader", 1, etcdAttr)

	// The session ends (its lease revoked by the server): the grant is
	// lost, the term too.
	s, err := client.Source().Current(ctx)
	require.NoError(t, err)
	_, err = c.Client(t).Revoke(ctx, s.Lease())
	require.NoError(t, err)
	<-s.Done()
	<-h.Done()
	m.await("dlock.lost", 1, etcdAttr, cause("session"))
	m.await("dlock.held", 0, etcdAttr)
	m.await("dlock.session.ended", 1, etcdAttr, cause("lease_gone"))
	m.await("dlock.election.leader", 0, etcdAttr)
	assert.ErrorIs(t, term.Err(), session.ErrLeaseGone)

	// The records come from the same goroutines, just after (or just
	// before) the counts: polled as await polls.
	var warned, lostLogged bool
	for deadline := time.Now().Add(10 * time.Second); !(warned && lostLogged) && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, r := range logs.records(t) {
			switch {
			case r["msg"] == "dlock: session ended" && r["level"] == "WARN":
				warned = true
			case r["msg"] == "dlock: lock lost" && r["level"] == "WARN":
				lostLogged = true
			}
		}
	}
	assert.True(t, warned, "a WARN record for the session loss")
	assert.True(t, lostLogged, "a WARN record for the lock loss")

	// Locks on the renewed session, one waiting behind the other, and
	// Unlocks: held goes up and down.
	h, err = l.Lock(ctx)
	require.NoError(t, err)
	w := etcdtest.WatchPuts(t, c.Client(t), "tel/lock/orders/")
	got := make(chan lock.Held, 1)
	go func() {
		h2, err := l.Lock(ctx)
		assert.NoError(t, err)
		got <- h2
	}()
	etcdtest.WaitPuts(t, w, 1)
	m.assert("dlock.held", 1, etcdAttr)
	require.NoError(t, h.Unlock(ctx))
	require.NoError(t, (<-got).Unlock(ctx))
	m.assert("dlock.held", 0, etcdAttr)
	m.assert("dlock.acquire.duration", 4, etcdAttr, outcome("granted")) // 3 Locks and a Campaign
	m.assert("dlock.session.ended", 1, etcdAttr, cause("lease_gone"))

	var lockSpans []sdktrace.ReadOnlySpan
	for _, sp := range spans.Ended() {
		if sp.Name() == "dlock.lock" {
			lockSpans = append(lockSpans, sp)
		}
	}
	require.Len(t, lockSpans, 4, "one span per Lock")
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range lockSpans[0].Attributes() {
		attrs[kv.Key] = kv.Value
	}
	assert.Equal(t, "granted", attrs["dlock.outcome"].AsString())
	assert.Equal(t, "orders", attrs["dlock.lock"].AsString())
	assert.Equal(t, "etcd", attrs["dlock.backend"].AsString())
	assert.NotZero(t, attrs["dlock.token"].AsInt64())
	assert.Contains(t, attrs, attribute.Key("dlock.wait_s"))
	for i, want := range []struct {
		outcome string
		queued  bool
	}{{"granted", false}, {"canceled", false}, {"granted", false}, {"granted", true}} {
		attrs := map[attribute.Key]attribute.Value{}
		for _, kv := range lockSpans[i].Attributes() {
			attrs[kv.Key] = kv.Value
		}
		assert.Equal(t, want.outcome, attrs["dlock.outcome"].AsString(), "span %d", i)
		if want.outcome == "granted" {
			assert.Equal(t, want.queued, attrs["dlock.queued"].AsBool(), "span %d: waited behind another", i)
		}
	}
}

// A Client passes its Config's providers and logger to the Redis lockers it
// makes: each backend's acquires, grants and losses (a key deleted behind
// the holder's back, found by Unlock) appear with its dlock.backend, a span
// per acquire, and a WARN record per loss.
func TestTelemetryRedisClient(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{dlock.BackendRedis, dlock.BackendRedlock} {
		t.Run(backend, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			m, mp := newMetrics(t)
			spans := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
			defer tp.Shutdown(context.Background())
			var logs syncBuffer
			n := 1
			if backend == dlock.BackendRedlock {
				n = 3
			}
			servers := redistest.StartN(t, n)
			var endpoints []string
			for _, s := range servers {
				endpoints = append(endpoints, s.Addr())
			}
			client, err := dlock.Open(ctx, dlock.Config{
				Backend: backend, Endpoints: endpoints, Prefix: "tel",
				MeterProvider: mp, TracerProvider: tp,
				Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			})
			require.NoError(t, err)
			defer client.Close(ctx)
			l, err := client.Locker("orders")
			require.NoError(t, err)
			b := attribute.String("dlock.backend", backend)

			h, err := l.Lock(ctx)
			require.NoError(t, err)
			m.assert("dlock.acquire.duration", 1, b, outcome("granted"))
			m.assert("dlock.held", 1, b)
			_, err = l.TryLock(ctx)
			require.ErrorIs(t, err, lock.ErrLocked)
			m.assert("dlock.acquire.duration", 1, b, outcome("locked"))
			for _, s := range servers {
				require.NoError(t, s.Client(t).Del(ctx, "tel:{orders}").Err())
			}
			require.ErrorIs(t, h.Unlock(ctx), lock.ErrLockLost)
			m.assert("dlock.lost", 1, b, cause("deleted"))
			m.assert("dlock.held", 0, b)

			var granted, lost bool
			for _, r := range logs.records(t) {
				switch {
				case r["msg"] == "dlock: granted" && r["level"] == "DEBUG" && r["backend"] == backend:
					granted = true
				case r["msg"] == "dlock: lock lost" && r["level"] == "WARN" && r["backend"] == backend && r["cause"] == "deleted":
					lost = true
				}
			}
			assert.True(t, granted, "a DEBUG record for the grant")
			assert.True(t, lost, "a WARN record for the loss")
			var names []string
			for _, sp := range spans.Ended() {
				names = append(names, sp.Name())
				attrs := map[attribute.Key]attribute.Value{}
				for _, kv := range sp.Attributes() {
					attrs[kv.Key] = kv.Value
				}
				assert.Equal(t, backend, attrs["dlock.backend"].AsString(), sp.Name())
				assert.Equal(t, "orders", attrs["dlock.lock"].AsString(), sp.Name())
			}
			assert.Equal(t, []string{"dlock.lock", "dlock.try_lock"}, names, "a span per acquire")
		})
	}
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

// records returns the JSON log records written so far.
func (s *syncBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	dec := json.NewDecoder(bytes.NewReader(s.b))
	for dec.More() {
		var r map[string]any
		require.NoError(t, dec.Decode(&r))
		out = append(out, r)
	}
	return out
}
