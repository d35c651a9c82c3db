package redis_test

import (
	"context"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/redis"
)

// TestRedlockContention measures 4 handles, each its own Redlock with its
// own clients on 3 nodes, looping Lock, hold 1 ms, Unlock for the
// duration in DLOCK_CONTENTION (e.g. 10s); it is skipped without it. It
// logs grants per second, the acquire p50, p99 and max, the longest time
// without a grant, and the SET NX sent to node 0 per grant: with all nodes
// up, and with node 2 unreachable (a blackholed proxy: each attempt waits
// the node timeout for it).
//
//	DLOCK_CONTENTION=10s go test -count=1 -v -run TestRedlockContention ./redis
func TestRedlockContention(t *testing.T) {
	t.Parallel()
	v := os.Getenv("DLOCK_CONTENTION")
	if v == "" {
		t.Skip("set DLOCK_CONTENTION to a duration (e.g. 10s) to measure")
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "DLOCK_CONTENTION")
	t.Run("all-up", func(t *testing.T) { measureContention(t, d, false, 0) })
	t.Run("all-up-jitter", func(t *testing.T) { measureContention(t, d, false, 2*time.Millisecond) })
	t.Run("one-unreachable", func(t *testing.T) { measureContention(t, d, true, 0) })
}

// measureContention runs the contention; unreachable blackholes node 2;
// a positive jitter delays every command by a uniform random time in
// [0, jitter) before it is sent, so that the contenders' SETs reach the
// nodes in different orders, as over a network.
func measureContention(t *testing.T, d time.Duration, unreachable bool, jitter time.Duration) {
	const (
		handles = 4
		hold    = time.Millisecond
	)
	servers := redistest.StartN(t, 3)
	var proxy *redistest.Proxy
	if unreachable {
		proxy = redistest.NewProxy(t, servers[2].Addr())
		proxy.Blackhole()
	}
	var attempts acquireCounter
	lockers := make([]*redis.Redlock, handles)
	for i := range lockers {
		clients := redistest.Clients(t, servers)
		if proxy != nil {
			c := goredis.NewClient(&goredis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			clients[2] = c
		}
		clients[0].(*goredis.Client).AddHook(&attempts)
		if jitter > 0 {
			for _, c := range clients {
				c.(*goredis.Client).AddHook(delayHook(jitter))
			}
		}
		r, err := redis.NewRedlock(clients, "contention")
		require.NoError(t, err)
		lockers[i] = r
	}
	drainAtEnd(t)

	ctx, cancel := context.WithTimeout(t.Context(), d+time.Minute)
	defer cancel()
	var (
		mu     sync.Mutex
		waits  []time.Duration
		grants []time.Time
	)
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for _, l := range lockers {
		wg.Go(func() {
			for time.Now().Before(end) {
				t0 := time.Now()
				h, err := l.Lock(ctx)
				if !assert.NoError(t, err) {
					return
				}
				at := time.Now()
				time.Sleep(hold)
				assert.NoError(t, h.Unlock(ctx))
				mu.Lock()
				waits = append(waits, at.Sub(t0))
				grants = append(grants, at)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	require.NotEmpty(t, waits, "no grant in %v", d)
	slices.Sort(waits)
	slices.SortFunc(grants, func(a, b time.Time) int { return a.Compare(b) })
	gap := grants[0].Sub(start)
	for i := 1; i < len(grants); i++ {
		gap = max(gap, grants[i].Sub(grants[i-1]))
	}
	pct := func(p float64) time.Duration { return waits[int(p*float64(len(waits)-1)+0.5)] }
	t.Logf("%d grants in %v: %.1f grants/s; acquire p50 %v, p99 %v, max %v; longest time without a grant %v; %.2f SET NX on node 0 per grant",
		len(waits), elapsed.Round(time.Millisecond), float64(len(waits))/elapsed.Seconds(),
		pct(0.50).Round(time.Microsecond), pct(0.99).Round(time.Microsecond), waits[len(waits)-1].Round(time.Microsecond),
		gap.Round(time.Millisecond), float64(attempts.n.Load())/float64(len(waits)))
}

// delayHook delays every command by a uniform random time in [0, max)
// before it is sent.
type delayHook time.Duration

func (delayHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (delayHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (h delayHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		t := time.NewTimer(rand.N(time.Duration(h)))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		return next(ctx, cmd)
	}
}
