package lock_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

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

// Uncontended Lock+Unlock: dlock's Mutex, etcd's concurrency.Mutex, and the
// floor (a bare Txn put-if-absent + a delete: two round trips).
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
	floorKey := "floor/bench"
	var dOurs, dAnchor, dFloor []time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		h, err := ours.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := anchor.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := anchor.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if _, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(floorKey), "=", 0)).
			Then(clientv3.OpPut(floorKey, "", clientv3.WithLease(cs.Lease()))).Commit(); err != nil {
			b.Fatal(err)
		}
		if _, err := cli.Delete(ctx, floorKey); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		dOurs, dAnchor, dFloor = append(dOurs, t1.Sub(t0)), append(dAnchor, t2.Sub(t1)), append(dFloor, t3.Sub(t2))
	}
	mo, ma, mf := median(dOurs), median(dAnchor), median(dFloor)
	b.ReportMetric(mo, "dlock-ns")
	b.ReportMetric(ma, "etcdmutex-ns")
	b.ReportMetric(mf, "floor-ns")
	b.ReportMetric(mo/ma, "x-etcdmutex")
	b.ReportMetric(mo/mf, "x-floor")
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
// granted. dlock needs one round trip after the watch event; etcd's Mutex
// needs two (it re-reads the queue, then its own key).
func BenchmarkHandoff16(b *testing.B) {
	const waiters = 16
	c := etcdtest.New(b)
	cli := c.Client(b)
	var ours, anchor []contender
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
		cm := concurrency.NewMutex(benchConcurrencySession(b, cli), "anchor/handoff")
		anchor = append(anchor, func(ctx context.Context) (func(context.Context) error, error) {
			return cm.Unlock, cm.Lock(ctx)
		})
	}
	const round = 32
	var dOurs, dAnchor []time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		dOurs = append(dOurs, handoffs(b, ours, round)...)
		dAnchor = append(dAnchor, handoffs(b, anchor, round)...)
	}
	mo, ma := median(dOurs), median(dAnchor)
	b.ReportMetric(mo, "dlock-ns/handoff")
	b.ReportMetric(ma, "etcdmutex-ns/handoff")
	b.ReportMetric(mo/ma, "x-etcdmutex")
}
