package redis_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/integration/oteltest"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/redis"
	"github.com/dlock-go/dlock/telemetry"
)

// observed is where one test's telemetry goes: a ManualReader, a span
// recorder and a JSON log buffer, and the options that send a lock's there.
type observed struct {
	t     *testing.T
	r     *sdkmetric.ManualReader
	spans *tracetest.SpanRecorder
	logs  *logBuffer
	opts  []redis.Option
}

func newObserved(t *testing.T) *observed {
	t.Helper()
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	logs := &logBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return &observed{t: t, r: r, spans: spans, logs: logs, opts: []redis.Option{
		redis.WithTelemetry(telemetry.Providers{MeterProvider: mp, TracerProvider: tp, Logger: log}),
	}}
}

// point returns the value (a histogram's count) of the data point of
// instrument name whose attributes are exactly attrs, and whether there is
// one.
func (o *observed) point(name string, attrs ...attribute.KeyValue) (float64, bool) {
	return oteltest.Point(o.t, o.r, name, attrs...)
}

func (o *observed) assert(name string, want float64, attrs ...attribute.KeyValue) {
	o.t.Helper()
	got, ok := o.point(name, attrs...)
	if assert.True(o.t, ok, "%s%v: no data point", name, attrs) {
		assert.Equal(o.t, want, got, "%s%v", name, attrs)
	}
}

// spanAttrs returns the attributes of the ended spans called name, in the
// order they ended.
func (o *observed) spanAttrs(name string) []map[attribute.Key]attribute.Value {
	var out []map[attribute.Key]attribute.Value
	for _, sp := range o.spans.Ended() {
		if sp.Name() != name {
			continue
		}
		attrs := map[attribute.Key]attribute.Value{}
		for _, kv := range sp.Attributes() {
			attrs[kv.Key] = kv.Value
		}
		out = append(out, attrs)
	}
	return out
}

// records returns the log records with message msg.
func (o *observed) records(msg string) []map[string]any {
	o.t.Helper()
	var out []map[string]any
	for _, r := range o.logs.records(o.t) {
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// logBuffer is a goroutine-safe sink of JSON log records.
type logBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *logBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	dec := json.NewDecoder(bytes.NewReader(l.b))
	for dec.More() {
		var r map[string]any
		require.NoError(t, dec.Decode(&r))
		out = append(out, r)
	}
	return out
}

var (
	outcomeAttr = func(o string) attribute.KeyValue { return attribute.String("dlock.outcome", o) }
	causeAttr   = func(c string) attribute.KeyValue { return attribute.String("dlock.cause", c) }
)

// TestTelemetryMutex: a Mutex records its acquires by outcome, held up on
// a grant and down once at its end, and its losses by cause (deleted:
// found gone by Extend or by Unlock; expired: the validity ran out while
// the watchdog's renewal hung on a stopped server); a span per acquire;
// DEBUG records for grants and releases, a WARN record per loss.
func TestTelemetryMutex(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	o := newObserved(t)
	backend := attribute.String("dlock.backend", "redis")
	s := redistest.Start(t)
	admin := s.Client(t)
	const key = redis.DefaultPrefix + "{orders}"
	m := newMutex(t, s.Client(t), "orders", append(o.opts, redis.WithTTL(10*time.Second))...)

	h, err := m.Lock(ctx)
	require.NoError(t, err)
	o.assert("dlock.acquire.duration", 1, backend, outcomeAttr("granted"))
	o.assert("dlock.held", 1, backend)
	_, err = m.TryLock(ctx)
	require.ErrorIs(t, err, lock.ErrLocked)
	o.assert("dlock.acquire.duration", 1, backend, outcomeAttr("locked"))
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	_, err = m.Lock(cctx)
	require.ErrorIs(t, err, context.Canceled)
	o.assert("dlock.acquire.duration", 1, backend, outcomeAttr("canceled"))

	// A waiter: granted once the holder unlocks, after it had registered
	// as a waiter (its first attempt was refused).
	got := make(chan lock.Held, 1)
	go func() {
		h2, err := m.Lock(ctx)
		assert.NoError(t, err)
		got <- h2
	}()
	require.Eventually(t, func() bool {
		n, err := admin.ZCard(ctx, key+":waiters").Result()
		return err == nil && n > 0
	}, 10*time.Second, time.Millisecond, "the waiter registered")
	require.NoError(t, h.Unlock(ctx))
	h = <-got
	require.NotNil(t, h)
	o.assert("dlock.held", 1, backend)
	o.assert("dlock.acquire.duration", 2, backend, outcomeAttr("granted"))
	assert.Len(t, o.records("dlock: released"), 1, "a DEBUG record per release")
	assert.Len(t, o.records("dlock: granted"), 2, "a DEBUG record per grant")

	// Deleted behind the holder's back; Extend finds it gone.
	require.NoError(t, admin.Del(ctx, key).Err())
	require.ErrorIs(t, h.(*redis.Grant).Extend(ctx), redis.ErrLockLost)
	o.assert("dlock.lost", 1, backend, causeAttr("deleted"))
	o.assert("dlock.held", 0, backend)
	require.ErrorIs(t, h.Unlock(ctx), redis.ErrLockLost)
	o.assert("dlock.held", 0, backend) // down once per grant
	o.assert("dlock.lost", 1, backend, causeAttr("deleted"))

	// Deleted behind the holder's back; Unlock finds it gone.
	h, err = m.TryLock(ctx)
	require.NoError(t, err)
	require.NoError(t, admin.Del(ctx, key).Err())
	require.ErrorIs(t, h.Unlock(ctx), redis.ErrLockLost)
	o.assert("dlock.lost", 2, backend, causeAttr("deleted"))
	o.assert("dlock.held", 0, backend)

	// The validity runs out while the renewal hangs on a stopped server.
	short := newMutex(t, s.DefaultClient(t), "orders", append(o.opts, redis.WithTTL(redis.MinTTL), redis.WithAutoExtend(0))...)
	drainAtEnd(t)
	h, err = short.Lock(ctx)
	require.NoError(t, err)
	o.assert("dlock.held", 1, backend)
	s.Pause()
	defer s.Resume()
	waitDone(t, h)
	s.Resume()
	require.ErrorIs(t, h.(*redis.Grant).Err(), redis.ErrLockLost)
	o.assert("dlock.lost", 1, backend, causeAttr("expired"))
	o.assert("dlock.held", 0, backend)
	assert.ErrorIs(t, h.Unlock(ctx), redis.ErrLockLost)
	o.assert("dlock.lost", 2, backend, causeAttr("deleted")) // not counted again
	o.assert("dlock.held", 0, backend)

	lost := o.records("dlock: lock lost")
	require.Len(t, lost, 3, "a WARN record per loss")
	for i, want := range []string{"deleted", "deleted", "expired"} {
		assert.Equal(t, "WARN", lost[i]["level"], "record %d", i)
		assert.Equal(t, want, lost[i]["cause"], "record %d", i)
		assert.Equal(t, "redis", lost[i]["backend"], "record %d", i)
		assert.Equal(t, "orders", lost[i]["lock"], "record %d", i)
		assert.NotEmpty(t, lost[i]["err"], "record %d", i)
	}

	locks := o.spanAttrs("dlock.lock")
	require.Len(t, locks, 4, "a span per Lock")
	for i, want := range []struct {
		outcome string
		queued  bool
	}{{"granted", false}, {"canceled", false}, {"granted", true}, {"granted", false}} {
		a := locks[i]
		assert.Equal(t, "redis", a["dlock.backend"].AsString(), "span %d", i)
		assert.Equal(t, "orders", a["dlock.lock"].AsString(), "span %d", i)
		assert.Equal(t, want.outcome, a["dlock.outcome"].AsString(), "span %d", i)
		assert.Contains(t, a, attribute.Key("dlock.wait_s"), "span %d", i)
		if want.outcome == "granted" {
			assert.NotZero(t, a["dlock.token"].AsInt64(), "span %d: the INCR token", i)
			assert.Equal(t, want.queued, a["dlock.queued"].AsBool(), "span %d: waited for a release", i)
		}
	}
	tries := o.spanAttrs("dlock.try_lock")
	require.Len(t, tries, 2, "a span per TryLock")
	assert.Equal(t, "locked", tries[0]["dlock.outcome"].AsString())
	assert.Equal(t, "granted", tries[1]["dlock.outcome"].AsString())
	assert.Equal(t, "redis", tries[1]["dlock.backend"].AsString())
}

// TestTelemetryRedlock: a Redlock records the same instruments with
// dlock.backend "redlock": grant, refusal, a loss found by Extend once a
// majority lost the key, and a validity that ran out; spans carry no token.
func TestTelemetryRedlock(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	o := newObserved(t)
	backend := attribute.String("dlock.backend", "redlock")
	servers := redistest.StartN(t, 3)
	clients := redistest.Clients(t, servers)
	const key = redis.DefaultPrefix + "{orders}"
	newRedlock := func(opts ...redis.Option) *redis.Redlock {
		r, err := redis.NewRedlock(clients, "orders", append(o.opts, opts...)...)
		require.NoError(t, err)
		drainAtEnd(t)
		return r
	}
	r := newRedlock(redis.WithTTL(10 * time.Second))

	h, err := r.Lock(ctx)
	require.NoError(t, err)
	o.assert("dlock.acquire.duration", 1, backend, outcomeAttr("granted"))
	o.assert("dlock.held", 1, backend)
	_, err = r.TryLock(ctx)
	require.ErrorIs(t, err, lock.ErrLocked)
	o.assert("dlock.acquire.duration", 1, backend, outcomeAttr("locked"))

	for _, s := range servers[:2] {
		require.NoError(t, s.Client(t).Del(ctx, key).Err())
	}
	require.ErrorIs(t, h.(*redis.Grant).Extend(ctx), redis.ErrLockLost)
	o.assert("dlock.lost", 1, backend, causeAttr("deleted"))
	o.assert("dlock.held", 0, backend)
	require.ErrorIs(t, h.Unlock(ctx), redis.ErrLockLost)
	o.assert("dlock.held", 0, backend)

	h, err = newRedlock(redis.WithTTL(redis.MinTTL)).Lock(ctx)
	require.NoError(t, err)
	o.assert("dlock.held", 1, backend)
	waitDone(t, h)
	o.assert("dlock.lost", 1, backend, causeAttr("expired"))
	o.assert("dlock.held", 0, backend)
	_ = h.Unlock(ctx) // the key may or may not have expired on the servers yet
	o.assert("dlock.held", 0, backend)

	h, err = r.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, h.Unlock(ctx))
	o.assert("dlock.held", 0, backend)
	o.assert("dlock.acquire.duration", 3, backend, outcomeAttr("granted"))
	o.assert("dlock.lost", 1, backend, causeAttr("deleted"))

	lost := o.records("dlock: lock lost")
	require.Len(t, lost, 2, "a WARN record per loss")
	for i, want := range []string{"deleted", "expired"} {
		assert.Equal(t, "WARN", lost[i]["level"], "record %d", i)
		assert.Equal(t, want, lost[i]["cause"], "record %d", i)
		assert.Equal(t, "redlock", lost[i]["backend"], "record %d", i)
	}
	locks := o.spanAttrs("dlock.lock")
	require.Len(t, locks, 3, "a span per Lock")
	for i, a := range locks {
		assert.Equal(t, "redlock", a["dlock.backend"].AsString(), "span %d", i)
		assert.Equal(t, "granted", a["dlock.outcome"].AsString(), "span %d", i)
		assert.Zero(t, a["dlock.token"].AsInt64(), "span %d: a Redlock has no token", i)
	}
	tries := o.spanAttrs("dlock.try_lock")
	require.Len(t, tries, 1)
	assert.Equal(t, "locked", tries[0]["dlock.outcome"].AsString())
}

// TestTelemetryOptions: the telemetry options take nil for their default,
// like package lock's; a nil option is an error that names it.
func TestTelemetryOptions(t *testing.T) {
	t.Parallel()
	var clients []goredis.UniversalClient
	for i := range 3 {
		c := goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", i+1)}) // never dialled
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	_, err := redis.New(clients[0], "x", redis.WithTelemetry(telemetry.Providers{}))
	assert.NoError(t, err)
	_, err = redis.NewRedlock(clients, "x", redis.WithTelemetry(telemetry.Providers{}))
	assert.NoError(t, err)
	_, err = redis.New(clients[0], "x", redis.WithTelemetry(telemetry.Providers{}), nil)
	if assert.ErrorIs(t, err, redis.ErrInvalidOption) {
		assert.Contains(t, err.Error(), "option 1")
	}
}
