package lock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/telemetry"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

// The benchmarks run dlock and the anchors interleaved in one loop on one
// embedded cluster, so machine noise hits all of them alike, and report the
// median of each and the ratio of the medians. ns/op is the sum of all the
// contenders' times per iteration and is not meaningful on its own.

func median(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2])
}

func benchSession(b *testing.B, cli *clientv3.Client) *session.Session {
	b.Helper()
	s, err := session.New(context.Background(), cli)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func benchConcurrencySession(b *testing.B, cli *clientv3.Client) *concurrency.Session {
	b.Helper()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// guardedUnlock is concurrency.Mutex.Unlock as etcd's fix for #22082
// (PR #22115) makes it: a delete guarded by the key's create revision, as
// dlock's Unlock is. Today's Unlock is a bare Delete, which a retried
// Unlock can aim at the same session's next acquisition.
func guardedUnlock(ctx context.Context, cli *clientv3.Client, m *concurrency.Mutex) error {
	_, err := cli.Txn(ctx).If(m.IsOwner()).Then(clientv3.OpDelete(m.Key())).Commit()
	return err
}

// Uncontended Lock+Unlock, interleaved: dlock's Mutex; etcd's
// concurrency.Mutex (the anchor) as released, and with the guarded Unlock
// of its #22082 fix; the floor (a bare Txn put-if-absent + a Delete: two
// round trips) and the floor with a guarded delete (what an Unlock that
// cannot delete a later holder's key costs at least).
func BenchmarkUncontended(b *testing.B) {
	c := etcdtest.New(b)
	cli := c.Client(b)
	ctx := context.Background()
	ours, err := lock.New(benchSession(b, cli), "bench")
	if err != nil {
		b.Fatal(err)
	}
	cs := benchConcurrencySession(b, cli)
	anchor := concurrency.NewMutex(cs, "anchor/bench")
	fixed := concurrency.NewMutex(cs, "fixed/bench")
	floorKey := "floor/bench"
	put := func() int64 {
		resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(floorKey), "=", 0)).
			Then(clientv3.OpPut(floorKey, "", clientv3.WithLease(cs.Lease()))).Commit()
		if err != nil {
			b.Fatal(err)
		}
		return resp.Header.Revision
	}
	contenders := []struct {
		metric string
		run    func() error
		d      []time.Duration
	}{
		{metric: "dlock", run: func() error {
			h, err := ours.Lock(ctx)
			if err != nil {
				return err
			}
			return h.Unlock(ctx)
		}},
		{metric: "etcdmutex", run: func() error {
			if err := anchor.Lock(ctx); err != nil {
				return err
			}
			return anchor.Unlock(ctx)
		}},
		{metric: "etcdmutex-fixed", run: func() error {
			if err := fixed.Lock(ctx); err != nil {
				return err
			}
			return guardedUnlock(ctx, cli, fixed)
		}},
		{metric: "floor", run: func() error {
			put()
			_, err := cli.Delete(ctx, floorKey)
			return err
		}},
		{metric: "floor-guarded", run: func() error {
			rev := put()
			_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(floorKey), "=", rev)).
				Then(clientv3.OpDelete(floorKey)).Commit()
			return err
		}},
	}
	b.ResetTimer()
	for b.Loop() {
		for i := range contenders {
			t0 := time.Now()
			if err := contenders[i].run(); err != nil {
				b.Fatal(err)
			}
			contenders[i].d = append(contenders[i].d, time.Since(t0))
		}
	}
	mo := median(contenders[0].d)
	b.ReportMetric(mo, "dlock-ns")
	for _, c := range contenders[1:] {
		m := median(c.d)
		b.ReportMetric(m, c.metric+"-ns")
		b.ReportMetric(mo/m, "x-"+c.metric)
	}
}

// contender is one lock implementation for the handoff benchmark: lock
// returns an unlock function.
type contender func(ctx context.Context) (unlock func(context.Context) error, err error)

// handoffs runs waiters goroutines that each loop Lock → Unlock on the same
// lock until n handoffs are measured, and returns the latencies from the
// start of one holder's Unlock to the next holder's Lock returning.
func handoffs(b *testing.B, lockers []contender, n int) []time.Duration {
	ctx := context.Background()
	var (
		mu       sync.Mutex
		lat      []time.Duration
		released time.Time
		stop     atomic.Bool
		wg       sync.WaitGroup
	)
	for _, l := range lockers {
		wg.Go(func() {
			for !stop.Load() {
				unlock, err := l(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				granted := time.Now()
				mu.Lock()
				if !released.IsZero() {
					lat = append(lat, granted.Sub(released))
					if len(lat) >= n {
						stop.Store(true)
					}
				}
				released = time.Now()
				mu.Unlock()
				if err := unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return lat
}

// Handoff latency with 16 waiters: release (start of Unlock) → next waiter
// granted, for dlock and for etcd's Mutex as released and with the guarded
// Unlock of its #22082 fix. dlock needs one round trip after the watch
// event (a serializable range); etcd's Mutex needs two
// linearizable reads (it re-reads the queue, then its own key).
func BenchmarkHandoff16(b *testing.B) {
	const waiters = 16
	c := etcdtest.New(b)
	cli := c.Client(b)
	var ours, anchor, fixed []contender
	for range waiters {
		m, err := lock.New(benchSession(b, cli), "handoff")
		if err != nil {
			b.Fatal(err)
		}
		ours = append(ours, func(ctx context.Context) (func(context.Context) error, error) {
			h, err := m.Lock(ctx)
			if err != nil {
				return nil, err
			}
			return h.Unlock, nil
		})
		cs := benchConcurrencySession(b, cli)
		cm := concurrency.NewMutex(cs, "anchor/handoff")
		anchor = append(anchor, func(ctx context.Context) (func(context.Context) error, error) {
			return cm.Unlock, cm.Lock(ctx)
		})
		fm := concurrency.NewMutex(cs, "fixed/handoff")
		fixed = append(fixed, func(ctx context.Context) (func(context.Context) error, error) {
			unlock := func(ctx context.Context) error { return guardedUnlock(ctx, cli, fm) }
			return unlock, fm.Lock(ctx)
		})
	}
	const round = 32
	var dOurs, dAnchor, dFixed []time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		dOurs = append(dOurs, handoffs(b, ours, round)...)
		dAnchor = append(dAnchor, handoffs(b, anchor, round)...)
		dFixed = append(dFixed, handoffs(b, fixed, round)...)
	}
	mo, ma, mf := median(dOurs), median(dAnchor), median(dFixed)
	b.ReportMetric(mo, "dlock-ns/handoff")
	b.ReportMetric(ma, "etcdmutex-ns/handoff")
	b.ReportMetric(mf, "etcdmutex-fixed-ns/handoff")
	b.ReportMetric(mo/ma, "x-etcdmutex")
	b.ReportMetric(mo/mf, "x-etcdmutex-fixed")
}

// RW lock vs etcd's recipes.RWMutex (the anchor), interleaved: an
// uncontended write Lock+Unlock and read RLock+Unlock each. The anchor's
// methods take no context; it reads its own key back on every acquire.
func BenchmarkRWUncontended(b *testing.B) {
	c := etcdtest.New(b)
	cli := c.Client(b)
	ctx := context.Background()
	ours, err := lock.NewRWMutex(benchSession(b, cli), "rw")
	if err != nil {
		b.Fatal(err)
	}
	anchor := recipe.NewRWMutex(benchConcurrencySession(b, cli), "anchor/rw")
	var dw, dr, aw, ar []time.Duration
	timed := func(d *[]time.Duration, f func() error) {
		t0 := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		*d = append(*d, time.Since(t0))
	}
	b.ResetTimer()
	for b.Loop() {
		timed(&dw, func() error {
			h, err := ours.Lock(ctx)
			if err != nil {
				return err
			}
			return h.Unlock(ctx)
		})
		timed(&aw, func() error {
			if err := anchor.Lock(); err != nil {
				return err
			}
			return anchor.Unlock()
		})
		timed(&dr, func() error {
			h, err := ours.RLock(ctx)
			if err != nil {
				return err
			}
			return h.Unlock(ctx)
		})
		timed(&ar, func() error {
			if err := anchor.RLock(); err != nil {
				return err
			}
			return anchor.RUnlock()
		})
	}
	b.ReportMetric(median(dw)/median(aw), "x-recipes-write")
	b.ReportMetric(median(dr)/median(ar), "x-recipes-read")
	b.ReportMetric(median(dw), "dlock-write-ns")
	b.ReportMetric(median(aw), "recipes-write-ns")
}

// Writer handoff with 16 writers looping Lock/Unlock (release → next
// writer granted), dlock's RWMutex vs recipes.RWMutex.
func BenchmarkRWHandoff16(b *testing.B) {
	const waiters = 16
	c := etcdtest.New(b)
	cli := c.Client(b)
	var ours, anchor []contender
	for range waiters {
		rw, err := lock.NewRWMutex(benchSession(b, cli), "rwhandoff")
		if err != nil {
			b.Fatal(err)
		}
		ours = append(ours, func(ctx context.Context) (func(context.Context) error, error) {
			h, err := rw.Lock(ctx)
			if err != nil {
				return nil, err
			}
			return h.Unlock, nil
		})
		am := recipe.NewRWMutex(benchConcurrencySession(b, cli), "anchor/rwhandoff")
		anchor = append(anchor, func(context.Context) (func(context.Context) error, error) {
			return func(context.Context) error { return am.Unlock() }, am.Lock()
		})
	}
	const round = 32
	var dOurs, dAnchor []time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		dOurs = append(dOurs, handoffs(b, ours, round)...)
		dAnchor = append(dAnchor, handoffs(b, anchor, round)...)
	}
	b.ReportMetric(median(dOurs), "dlock-ns/handoff")
	b.ReportMetric(median(dAnchor), "recipes-ns/handoff")
	b.ReportMetric(median(dOurs)/median(dAnchor), "x-recipes")
}

// Semaphore Acquire+release (3 permits) vs the Mutex's Lock+Unlock,
// uncontended, interleaved.
func BenchmarkSemaphoreUncontended(b *testing.B) {
	c := etcdtest.New(b)
	cli := c.Client(b)
	ctx := context.Background()
	s := benchSession(b, cli)
	sem, err := lock.NewSemaphore(s, "sem", 3)
	if err != nil {
		b.Fatal(err)
	}
	m, err := lock.New(s, "mutex")
	if err != nil {
		b.Fatal(err)
	}
	var ds, dm []time.Duration
	b.ResetTimer()
	for b.Loop() {
		for _, x := range []struct {
			d       *[]time.Duration
			acquire func(context.Context) (lock.Held, error)
		}{{&ds, sem.Acquire}, {&dm, m.Lock}} {
			t0 := time.Now()
			h, err := x.acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := h.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			*x.d = append(*x.d, time.Since(t0))
		}
	}
	b.ReportMetric(median(ds), "semaphore-ns")
	b.ReportMetric(median(dm), "mutex-ns")
	b.ReportMetric(median(ds)/median(dm), "x-mutex")
}

// Time per grant with 16 contenders looping Lock/Unlock on one lock: the
// wall time of a round divided by its grants (throughput under
// contention, which includes each holder's own Unlock and re-enqueue), for
// dlock and etcd's Mutex, rounds interleaved.
func BenchmarkContended16(b *testing.B) { benchContended(b, 16) }

// The same with 2 contenders: each Unlock is followed at once by the same
// client's next enqueue, behind the other, whose grant and release often
// come before the new waiter's watch starts.
func BenchmarkContended2(b *testing.B) { benchContended(b, 2) }

func benchContended(b *testing.B, contenders int) {
	const round = 64
	c := etcdtest.New(b)
	cli := c.Client(b)
	var ours, anchor []contender
	for range contenders {
		m, err := lock.New(benchSession(b, cli), "contended")
		if err != nil {
			b.Fatal(err)
		}
		ours = append(ours, func(ctx context.Context) (func(context.Context) error, error) {
			h, err := m.Lock(ctx)
			if err != nil {
				return nil, err
			}
			return h.Unlock, nil
		})
		cm := concurrency.NewMutex(benchConcurrencySession(b, cli), "anchor/contended")
		anchor = append(anchor, func(ctx context.Context) (func(context.Context) error, error) {
			return cm.Unlock, cm.Lock(ctx)
		})
	}
	var dOurs, dAnchor []time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		dOurs = append(dOurs, perGrant(b, ours, round))
		dAnchor = append(dAnchor, perGrant(b, anchor, round))
	}
	b.ReportMetric(median(dOurs), "dlock-ns/grant")
	b.ReportMetric(median(dAnchor), "etcdmutex-ns/grant")
	b.ReportMetric(median(dOurs)/median(dAnchor), "x-etcdmutex")
}

// perGrant runs the contenders, each looping Lock → Unlock, until n grants
// were made, and returns the wall time per grant (counting every grant,
// also those the contenders still waiting make on their way out).
func perGrant(b *testing.B, lockers []contender, n int64) time.Duration {
	ctx := context.Background()
	var grants atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for _, l := range lockers {
		wg.Go(func() {
			for grants.Load() < n {
				unlock, err := l(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				grants.Add(1)
				if err := unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(t0) / time.Duration(grants.Load())
}

// Parallel acquires of 64 distinct locks on one session (one etcd
// concurrency.Session for the anchor): 64 goroutines each loop Lock/Unlock
// of their own lock for a fixed number of rounds; throughput is grants per
// second, dlock and etcd's Mutex in alternate rounds.
func BenchmarkParallel64(b *testing.B) {
	const locks, perRound = 64, 8
	c := etcdtest.New(b)
	cli := c.Client(b)
	s := benchSession(b, cli)
	cs := benchConcurrencySession(b, cli)
	ctx := context.Background()
	var ours []*lock.Mutex
	var anchor, fixed []*concurrency.Mutex
	for i := range locks {
		m, err := lock.New(s, fmt.Sprintf("par/%d", i))
		if err != nil {
			b.Fatal(err)
		}
		ours = append(ours, m)
		anchor = append(anchor, concurrency.NewMutex(cs, fmt.Sprintf("anchor/par/%d", i)))
		fixed = append(fixed, concurrency.NewMutex(cs, fmt.Sprintf("fixed/par/%d", i)))
	}
	run := func(one func(i int) error) float64 {
		var wg sync.WaitGroup
		t0 := time.Now()
		for i := range locks {
			wg.Go(func() {
				for range perRound {
					if err := one(i); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return float64(locks*perRound) / time.Since(t0).Seconds()
	}
	var tOurs, tAnchor, tFixed []float64
	b.ResetTimer()
	for done := 0; done < b.N; done += locks * perRound {
		tOurs = append(tOurs, run(func(i int) error {
			h, err := ours[i].Lock(ctx)
			if err != nil {
				return err
			}
			return h.Unlock(ctx)
		}))
		tAnchor = append(tAnchor, run(func(i int) error {
			if err := anchor[i].Lock(ctx); err != nil {
				return err
			}
			return anchor[i].Unlock(ctx)
		}))
		tFixed = append(tFixed, run(func(i int) error {
			if err := fixed[i].Lock(ctx); err != nil {
				return err
			}
			return guardedUnlock(ctx, cli, fixed[i])
		}))
	}
	mo, ma := medianF(tOurs), medianF(tAnchor)
	b.ReportMetric(mo, "dlock-grants/s")
	b.ReportMetric(ma, "etcdmutex-grants/s")
	b.ReportMetric(mo/ma, "x-etcdmutex-throughput")
	b.ReportMetric(mo/medianF(tFixed), "x-etcdmutex-fixed-throughput")
}

func medianF(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// Growth with held locks: a session holds N locks (Done watched), then
// Lock+Unlock of one more lock on it is timed; with the heap per held lock
// and the time of the session's per-heartbeat key check (the
// LeaseTimeToLive with keys it sends), which grows with N.
func BenchmarkGrowthHeld(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			c := etcdtest.New(b)
			cli := c.Client(b)
			ctx := context.Background()
			s := benchSession(b, cli)
			heap0 := heapNow()
			var held []lock.Held
			for i := range n {
				m, err := lock.New(s, fmt.Sprintf("held/%d", i))
				if err != nil {
					b.Fatal(err)
				}
				h, err := m.Lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				h.Done()
				held = append(held, h)
			}
			perLock := float64(heapNow()-heap0) / float64(n)
			m, err := lock.New(s, "growth")
			if err != nil {
				b.Fatal(err)
			}
			var d, check []time.Duration
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				h, err := m.Lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := h.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
				d = append(d, time.Since(t0))
				if len(d)%10 == 0 {
					t1 := time.Now()
					if _, err := cli.TimeToLive(ctx, s.Lease(), clientv3.WithAttachedKeys()); err != nil {
						b.Fatal(err)
					}
					check = append(check, time.Since(t1))
				}
			}
			b.StopTimer()
			b.ReportMetric(median(d), "lock-unlock-ns")
			b.ReportMetric(median(check), "key-check-ns")
			b.ReportMetric(perLock, "heap-B/held")
			for _, h := range held {
				h.Unlock(ctx)
			}
		})
	}
}

// Growth with queue depth: D waiters (each on its own session) queue on
// one lock; the holder releases and each waiter unlocks as soon as it is
// granted. Reported: the median time per handoff along that chain, and the
// time of a refused TryLock at that depth (one round trip whose compare
// covers the queue).
func BenchmarkGrowthDepth(b *testing.B) {
	for _, depth := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprint(depth), func(b *testing.B) {
			c := etcdtest.New(b)
			cli := c.Client(b)
			ctx := context.Background()
			var waiters []*lock.Mutex
			for range depth {
				m, err := lock.New(benchSession(b, cli), "depth")
				if err != nil {
					b.Fatal(err)
				}
				waiters = append(waiters, m)
			}
			holder, err := lock.New(benchSession(b, cli), "depth")
			if err != nil {
				b.Fatal(err)
			}
			var handoff, try []time.Duration
			b.ResetTimer()
			for b.Loop() {
				h, err := holder.Lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				w := cli.Watch(ctx, holder.Prefix(), clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithRev(int64(h.Token().Seq)+1))
				var wg sync.WaitGroup
				var mu sync.Mutex
				var last time.Time
				for _, m := range waiters {
					wg.Go(func() {
						g, err := m.Lock(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						handoff = append(handoff, time.Since(last))
						last = time.Now()
						mu.Unlock()
						g.Unlock(ctx)
					})
				}
				for n := 0; n < depth; {
					wr := <-w
					n += len(wr.Events)
				}
				t0 := time.Now()
				if _, err := holder.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
					b.Fatal(err)
				}
				try = append(try, time.Since(t0))
				mu.Lock()
				last = time.Now()
				mu.Unlock()
				if err := h.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
				wg.Wait()
			}
			b.StopTimer()
			b.ReportMetric(median(handoff), "ns/handoff")
			b.ReportMetric(median(try), "trylock-refused-ns")
		})
	}
}

func heapNow() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Telemetry's cost: uncontended Lock+Unlock with metrics and traces on
// (the OpenTelemetry SDK, spans to an exporter that drops them behind the
// batch span processor, metrics to a manual reader never read) and off
// (no-op providers), interleaved in one loop. All the contenders lock the
// same name on one session, so they touch the same keys. Two controls run
// in the same loop: a second "off" Mutex (off2/off, x-aa, is the noise
// floor of x-off; the two are the baseline together), and the SDK floor:
// an "off" Mutex with the least telemetry the instruments and spans need
// done by hand around it (one span with the outcome, wait, token and
// queued attributes, one histogram record, the held counter up and down,
// on the same providers). x-floor is what the SDK costs any instrumented
// lock here; x-over-floor is what dlock's telemetry costs beyond it.
func BenchmarkTelemetryOverhead(b *testing.B) {
	c := etcdtest.New(b)
	cli := c.Client(b)
	ctx := context.Background()
	s := benchSession(b, cli)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { mp.Shutdown(ctx); tp.Shutdown(ctx) })
	offOpts := []lock.Option{lock.WithTelemetry(telemetry.Providers{MeterProvider: metricnoop.NewMeterProvider(), TracerProvider: tracenoop.NewTracerProvider()})}
	var ms [3]*lock.Mutex
	for i, opts := range [][]lock.Option{{lock.WithTelemetry(telemetry.Providers{MeterProvider: mp, TracerProvider: tp})}, offOpts, offOpts} {
		m, err := lock.New(s, "telemetry", opts...)
		if err != nil {
			b.Fatal(err)
		}
		ms[i] = m
	}
	tracer, meter := tp.Tracer("floor"), mp.Meter("floor")
	hist, _ := meter.Float64Histogram("floor.acquire.duration")
	held, _ := meter.Int64UpDownCounter("floor.held")
	set := attribute.NewSet(attribute.String("dlock.backend", "etcd"))
	granted := attribute.NewSet(attribute.String("dlock.backend", "etcd"), attribute.String("dlock.outcome", "granted"))
	lockUnlock := func(m *lock.Mutex) error {
		h, err := m.Lock(ctx)
		if err != nil {
			return err
		}
		return h.Unlock(ctx)
	}
	contenders := []func() error{
		func() error { return lockUnlock(ms[0]) }, // on
		func() error { return lockUnlock(ms[1]) }, // off
		func() error { return lockUnlock(ms[2]) }, // off2
		func() error { // floor
			t0 := time.Now()
			_, span := tracer.Start(ctx, "floor.lock", trace.WithSpanKind(trace.SpanKindClient))
			h, err := ms[1].Lock(ctx)
			if err != nil {
				return err
			}
			wait := time.Since(t0).Seconds()
			hist.Record(ctx, wait, metric.WithAttributeSet(granted))
			span.SetAttributes(attribute.String("dlock.outcome", "granted"), attribute.Float64("dlock.wait_s", wait),
				attribute.Int64("dlock.token", int64(h.Token().Seq)), attribute.Bool("dlock.queued", false))
			span.End()
			held.Add(ctx, 1, metric.WithAttributeSet(set))
			err = h.Unlock(ctx)
			held.Add(ctx, -1, metric.WithAttributeSet(set))
			return err
		},
	}
	// A fresh random order each round, so that each contender runs
	// first, last, after each of the others and after itself equally
	// often in expectation (the six orders of three in turn, used
	// before, let two of them but never the third run twice in a row,
	// at the rounds' seams).
	rng := rand.New(rand.NewPCG(1, 2))
	order := []int{0, 1, 2, 3}
	d := make([][]time.Duration, len(contenders)) // on, off, off2, floor
	b.ResetTimer()
	for b.Loop() {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, k := range order {
			t0 := time.Now()
			if err := contenders[k](); err != nil {
				b.Fatal(err)
			}
			d[k] = append(d[k], time.Since(t0))
		}
	}
	// The two "off" Mutexes' times together are the baseline.
	on, off, floor := median(d[0]), median(append(slices.Clone(d[1]), d[2]...)), median(d[3])
	b.ReportMetric(on, "on-ns")
	b.ReportMetric(off, "off-ns")
	b.ReportMetric(on/off, "x-off")
	b.ReportMetric(median(d[2])/median(d[1]), "x-aa")
	b.ReportMetric(floor/off, "x-floor")
	b.ReportMetric(on/floor, "x-over-floor")
}

// Time per grant with 8 contenders looping Acquire/Release on a semaphore
// of 2 permits (each on its own session); the Mutex with the same 8 in
// the same loop, for scale.
func BenchmarkSemaphoreContended8(b *testing.B) {
	const contenders, round = 8, 64
	c := etcdtest.New(b)
	cli := c.Client(b)
	var sems, mutexes []contender
	for range contenders {
		s := benchSession(b, cli)
		sem, err := lock.NewSemaphore(s, "sem-contended", 2)
		if err != nil {
			b.Fatal(err)
		}
		sems = append(sems, func(ctx context.Context) (func(context.Context) error, error) {
			h, err := sem.Acquire(ctx)
			if err != nil {
				return nil, err
			}
			return h.Unlock, nil
		})
		m, err := lock.New(s, "mutex-contended")
		if err != nil {
			b.Fatal(err)
		}
		mutexes = append(mutexes, func(ctx context.Context) (func(context.Context) error, error) {
			h, err := m.Lock(ctx)
			if err != nil {
				return nil, err
			}
			return h.Unlock, nil
		})
	}
	var dSem, dMutex []time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		dSem = append(dSem, perGrant(b, sems, round))
		dMutex = append(dMutex, perGrant(b, mutexes, round))
	}
	b.ReportMetric(median(dSem), "semaphore-ns/grant")
	b.ReportMetric(median(dMutex), "mutex-ns/grant")
}

// The reads a waiter's acquire makes, against the depth of the queue it
// joins: etcd ranges a prefix read that is sorted by create revision or
// filtered by revision in full (it has no index by create revision), so
// each costs O(depth) at the member (inside a Txn, in its apply loop).
// dlock's enqueue Txn reads the last entry, keys only (from etcd's
// in-memory index), and its waiter reads its predecessor the same way
// after each watch event; etcd's Mutex reads the owner with its value
// inside its Txn, then the last entry before it. A point Get is the floor.
// depth keys (in random name order, as lease-slot names are) are put under
// one prefix, then each read is timed, interleaved, and reported in µs
// (medians).
func BenchmarkGrowthReads(b *testing.B) {
	for _, depth := range []int{10, 100, 1000, 10000} {
		b.Run(fmt.Sprint(depth), func(b *testing.B) {
			c := etcdtest.New(b)
			cli := c.Client(b)
			ctx := context.Background()
			const pfx = "reads/"
			for i := range depth {
				if _, err := cli.Put(ctx, fmt.Sprintf("%s%08x-%d", pfx, rand.Uint32(), i), "value-of-a-queue-entry"); err != nil {
					b.Fatal(err)
				}
			}
			resp, err := cli.Get(ctx, pfx, clientv3.WithLastCreate()...)
			if err != nil {
				b.Fatal(err)
			}
			last := resp.Kvs[0]
			reads := []struct {
				name string
				do   func() error
			}{
				{"dlock-enqueue-txn", func() error { // the Txn's read, without its put
					_, err := cli.Txn(ctx).Then(clientv3.OpGet(pfx, append(clientv3.WithLastCreate(), clientv3.WithKeysOnly())...)).Commit()
					return err
				}},
				{"dlock-check", func() error {
					_, err := cli.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
						clientv3.WithLimit(2), clientv3.WithMaxCreateRev(last.CreateRevision), clientv3.WithKeysOnly(), clientv3.WithSerializable())
					return err
				}},
				{"etcdmutex-owner-txn", func() error {
					_, err := cli.Txn(ctx).Then(clientv3.OpGet(pfx, clientv3.WithFirstCreate()...)).Commit()
					return err
				}},
				{"etcdmutex-wait", func() error {
					_, err := cli.Get(ctx, pfx, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(last.CreateRevision-1))...)
					return err
				}},
				{"point-get", func() error {
					_, err := cli.Get(ctx, string(last.Key), clientv3.WithKeysOnly())
					return err
				}},
			}
			times := make([][]time.Duration, len(reads))
			b.ResetTimer()
			for b.Loop() {
				for i, r := range reads {
					t0 := time.Now()
					if err := r.do(); err != nil {
						b.Fatal(err)
					}
					times[i] = append(times[i], time.Since(t0))
				}
			}
			b.StopTimer()
			for i, r := range reads {
				b.ReportMetric(median(times[i])/1e3, r.name+"-µs")
			}
		})
	}
}
