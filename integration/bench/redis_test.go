package bench_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/redis"
)

// The anchor benchmarks run dlock and its peers (bsm/redislock on one
// node, go-redsync/redsync over five) interleaved in one loop on the same
// servers, so that machine noise hits both alike, and report the median of
// each and the ratio of the medians (x-<anchor>: below 1 is dlock ahead).
// ns/op is the sum of both and not the figure to read.

// settle is how long a handoff benchmark lets the waiter queue before the
// release (as package redis's own benchmarks do).
const settle = 5 * time.Millisecond

// lockFn acquires a lock and returns its unlock.
type lockFn func(ctx context.Context) (unlock func(context.Context) error, err error)

func medianOf(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2])
}

// interleave runs each contender once per iteration, in alternating order,
// and reports the medians and ours/anchor.
func interleave(b *testing.B, ours, anchor string, round func(i int) (time.Duration, time.Duration)) {
	var do, da []time.Duration
	for i := 0; b.Loop(); i++ {
		o, a := round(i)
		do, da = append(do, o), append(da, a)
	}
	mo, ma := medianOf(do), medianOf(da)
	b.ReportMetric(mo, ours+"-ns")
	b.ReportMetric(ma, anchor+"-ns")
	b.ReportMetric(mo/ma, "x-"+anchor)
}

// alternate runs ours and anchor, ours first in even rounds i and anchor
// first in odd ones, and returns their times.
func alternate(i int, ours, anchor func() time.Duration) (o, a time.Duration) {
	if i%2 == 0 {
		o = ours()
		return o, anchor()
	}
	a = anchor()
	return ours(), a
}

// timeLockUnlock returns how long one Lock+Unlock of l took.
func timeLockUnlock(b *testing.B, ctx context.Context, l lockFn) time.Duration {
	t0 := time.Now()
	unlock, err := l(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := unlock(ctx); err != nil {
		b.Fatal(err)
	}
	return time.Since(t0)
}

// uncontended measures ours and anchor's Lock+Unlock, alternating which
// goes first.
func uncontended(b *testing.B, ours, anchor lockFn, anchorName string) {
	ctx := b.Context()
	interleave(b, "dlock", anchorName, func(i int) (o, a time.Duration) {
		return alternate(i, func() time.Duration { return timeLockUnlock(b, ctx, ours) },
			func() time.Duration { return timeLockUnlock(b, ctx, anchor) })
	})
}

// lockerFn is l's Lock, returning the grant's Unlock; stragglers are
// drained when b ends.
func lockerFn(b *testing.B, l lock.Locker) lockFn {
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(b.Context()), 30*time.Second)
		defer cancel()
		if err := redis.Drain(ctx); err != nil {
			b.Errorf("stragglers did not end: %v", err)
		}
	})
	return func(ctx context.Context) (func(context.Context) error, error) {
		h, err := l.Lock(ctx)
		if err != nil {
			return nil, err
		}
		return h.Unlock, nil
	}
}

func mutexFn(b *testing.B, c goredis.UniversalClient, name string) lockFn {
	m, err := redis.New(c, name)
	if err != nil {
		b.Fatal(err)
	}
	return lockerFn(b, m)
}

func redlockFn(b *testing.B, cs []goredis.UniversalClient, name string) lockFn {
	r, err := redis.NewRedlock(cs, name)
	if err != nil {
		b.Fatal(err)
	}
	return lockerFn(b, r)
}

// redislockFn is bsm/redislock with dlock's default TTL and, for waiting,
// a linear 10 ms retry (its README's example; it has no notification).
func redislockFn(c goredis.UniversalClient, key string) lockFn {
	rl := redislock.New(c)
	opt := &redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)}
	return func(ctx context.Context) (func(context.Context) error, error) {
		l, err := rl.Obtain(ctx, key, redis.DefaultTTL, opt)
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
}

// redislockAsUsers is bsm/redislock as its README obtains a lock: a 10 s
// TTL and nil options (no retry).
func redislockAsUsers(c goredis.UniversalClient, key string) lockFn {
	rl := redislock.New(c)
	return func(ctx context.Context) (func(context.Context) error, error) {
		l, err := rl.Obtain(ctx, key, 10*time.Second, nil)
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
}

// redsyncFn is go-redsync/redsync over cs with dlock's default TTL and its
// own retry defaults (32 tries, 50–250 ms apart).
func redsyncFn(cs []goredis.UniversalClient, name string, opts ...redsync.Option) lockFn {
	pools := make([]redsyncredis.Pool, len(cs))
	for i, c := range cs {
		pools[i] = redsyncgoredis.NewPool(c)
	}
	rs := redsync.New(pools...)
	return func(ctx context.Context) (func(context.Context) error, error) {
		m := rs.NewMutex(name, append([]redsync.Option{redsync.WithExpiry(redis.DefaultTTL)}, opts...)...)
		if err := m.LockContext(ctx); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			ok, err := m.UnlockContext(ctx)
			if err == nil && !ok {
				err = errors.New("redsync: not unlocked")
			}
			return err
		}, nil
	}
}

// BenchmarkVsRedislock: uncontended Lock+Unlock on one Redis node, dlock's
// Mutex (with its fencing token) against bsm/redislock (none), on a client
// that honours ctx deadlines (the Mutex runs its commands inline).
func BenchmarkVsRedislock(b *testing.B) {
	s := redistest.Start(b)
	c := s.Client(b)
	uncontended(b, mutexFn(b, c, "bench/vs"), redislockFn(c, "anchor/vs"), "redislock")
}

// BenchmarkVsRedislockDefaultClient: the same on a client with go-redis'
// default options (the Mutex runs each command in a goroutine, to return
// on time from a stalled node).
func BenchmarkVsRedislockDefaultClient(b *testing.B) {
	s := redistest.Start(b)
	c := s.DefaultClient(b)
	uncontended(b, mutexFn(b, c, "bench/vs"), redislockFn(c, "anchor/vs"), "redislock")
}

// BenchmarkVsRedislockAsUsersMakeIt: the set-up of issue 38, as most
// users write it: a client made with go-redis' defaults and nothing else
// (goredis.NewClient(&goredis.Options{Addr: addr})), dlock's
// redis.New(c, name, redis.WithTTL(10*time.Second)) against
// redislock.New(c).Obtain(ctx, key, 10*time.Second, nil) and Release,
// with context.Background().
func BenchmarkVsRedislockAsUsersMakeIt(b *testing.B) {
	s := redistest.Start(b)
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	defer c.Close()
	m, err := redis.New(c, "bench/users", redis.WithTTL(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	ours, anchor := lockerFn(b, m), redislockAsUsers(c, "anchor/users")
	ctx := context.Background()
	interleave(b, "dlock", "redislock", func(i int) (o, a time.Duration) {
		return alternate(i, func() time.Duration { return timeLockUnlock(b, ctx, ours) },
			func() time.Duration { return timeLockUnlock(b, ctx, anchor) })
	})
}

// BenchmarkVsRedsync: uncontended Lock+Unlock over five independent Redis
// nodes, dlock's Redlock against go-redsync/redsync.
func BenchmarkVsRedsync(b *testing.B) {
	servers := redistest.StartN(b, 5)
	cs := redistest.Clients(b, servers)
	uncontended(b, redlockFn(b, cs, "bench/vs"), redsyncFn(cs, "anchor/vs"), "redsync")
}

// handoff measures one handoff of l between two handles a and b (lockFns
// of one lock): a holds; a waiter on b starts, settles (outside the
// measured time), a unlocks, and the time until b's Lock returns is the
// handoff. b then unlocks.
func handoff(b *testing.B, ctx context.Context, holder, waiter lockFn) time.Duration {
	unlock, err := holder(ctx)
	if err != nil {
		b.Fatal(err)
	}
	type grant struct {
		unlock func(context.Context) error
		at     time.Time
		err    error
	}
	got := make(chan grant, 1)
	go func() {
		u, err := waiter(ctx)
		got <- grant{u, time.Now(), err}
	}()
	time.Sleep(settle) // a benchmark's pacing, not synchronisation: the result is read from got
	released := time.Now()
	if err := unlock(ctx); err != nil {
		b.Fatal(err)
	}
	g := <-got
	if g.err != nil {
		b.Fatal(g.err)
	}
	d := g.at.Sub(released)
	if err := g.unlock(ctx); err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkHandoffVsRedislock: Unlock → the already waiting Lock returns,
// on one Redis node: dlock's Mutex (woken by the release's PUBLISH)
// against bsm/redislock retrying every 10 ms.
func BenchmarkHandoffVsRedislock(b *testing.B) {
	s := redistest.Start(b)
	ctx := b.Context()
	oa, ob := mutexFn(b, s.Client(b), "bench/handoff"), mutexFn(b, s.Client(b), "bench/handoff")
	aa, ab := redislockFn(s.Client(b), "anchor/handoff"), redislockFn(s.Client(b), "anchor/handoff")
	interleave(b, "dlock", "redislock", func(i int) (o, a time.Duration) {
		return alternate(i, func() time.Duration { return handoff(b, ctx, oa, ob) },
			func() time.Duration { return handoff(b, ctx, aa, ab) })
	})
}

// BenchmarkHandoffVsRedsync: the same over five nodes, dlock's Redlock
// against go-redsync/redsync with its default retry delay (50–250 ms).
func BenchmarkHandoffVsRedsync(b *testing.B) {
	servers := redistest.StartN(b, 5)
	ctx := b.Context()
	oa, ob := redlockFn(b, redistest.Clients(b, servers), "bench/handoff"), redlockFn(b, redistest.Clients(b, servers), "bench/handoff")
	cs := redistest.Clients(b, servers)
	aa, ab := redsyncFn(cs, "anchor/handoff"), redsyncFn(redistest.Clients(b, servers), "anchor/handoff")
	interleave(b, "dlock", "redsync", func(i int) (o, a time.Duration) {
		return alternate(i, func() time.Duration { return handoff(b, ctx, oa, ob) },
			func() time.Duration { return handoff(b, ctx, aa, ab) })
	})
}

// acquireCounter is a go-redis hook that counts dlock's acquire attempts:
// the Mutex's, EVALSHA (or EVAL) calls of its acquire script, whose SHA1
// learn finds; the Redlock's, SET NX of a dlock key.
type acquireCounter struct {
	n       atomic.Int64
	learned atomic.Value // the acquire script's SHA1, as EVALSHA's first argument
}

// learn makes m run its acquire script once (a TryLock, then the Unlock) and
// records the script's SHA1: the first EVALSHA of a TryLock is the acquire.
func (a *acquireCounter) learn(b *testing.B, c goredis.UniversalClient, name string) {
	b.Helper()
	var first atomic.Value
	c.AddHook(hookFunc(func(cmd goredis.Cmder) {
		if args := cmd.Args(); cmd.Name() == "evalsha" && len(args) > 1 {
			first.CompareAndSwap(nil, fmt.Sprint(args[1]))
		}
	}))
	l, err := redis.New(c, name)
	if err != nil {
		b.Fatal(err)
	}
	h, err := l.TryLock(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	if err := h.Unlock(b.Context()); err != nil {
		b.Fatal(err)
	}
	sha, _ := first.Load().(string)
	if sha == "" {
		b.Fatal("no EVALSHA seen in a TryLock")
	}
	a.learned.Store(sha)
}

// hookFunc is a go-redis hook that shows each command to f.
type hookFunc func(goredis.Cmder)

func (hookFunc) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (hookFunc) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (f hookFunc) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		f(cmd)
		return next(ctx, cmd)
	}
}

func (*acquireCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (*acquireCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (a *acquireCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		args := cmd.Args()
		sha, _ := a.learned.Load().(string)
		if len(args) > 1 && (cmd.Name() == "evalsha" && args[1] == sha ||
			cmd.Name() == "set" && slices.Contains(args, any("nx")) && strings.HasPrefix(fmt.Sprint(args[1]), redis.DefaultPrefix)) {
			a.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// contended runs waiters goroutines, each with its own lockFn on one lock,
// looping Lock → Unlock until grants grants in all, and returns the time
// per grant.
func contended(b *testing.B, fns []lockFn, grants int) time.Duration {
	ctx := b.Context()
	var left atomic.Int64
	left.Store(int64(grants))
	var wg sync.WaitGroup
	start := time.Now()
	for _, l := range fns {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				unlock, err := l(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if err := unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start) / time.Duration(grants)
}

// BenchmarkContended16VsRedislock: 16 contenders looping Lock → Unlock on
// one lock on one Redis node, time per grant: dlock's Mutex (a release
// wakes the oldest waiter only; acquire attempts per grant are counted)
// against bsm/redislock retrying every 10 ms.
func BenchmarkContended16VsRedislock(b *testing.B) {
	const contenders, grants = 16, 64
	s := redistest.Start(b)
	var count acquireCounter
	c := s.Client(b)
	count.learn(b, s.Client(b), "bench/learn")
	c.AddHook(&count)
	ours, anchor := make([]lockFn, contenders), make([]lockFn, contenders)
	for i := range contenders {
		ours[i] = mutexFn(b, c, "bench/contended")
		anchor[i] = redislockFn(c, "anchor/contended")
	}
	var attempts, n int64
	interleave(b, "dlock", "redislock", func(i int) (o, a time.Duration) {
		return alternate(i, func() time.Duration {
			before := count.n.Load()
			d := contended(b, ours, grants)
			attempts, n = attempts+count.n.Load()-before, n+grants
			return d
		}, func() time.Duration { return contended(b, anchor, grants) })
	})
	b.ReportMetric(float64(attempts)/float64(n), "dlock-attempts/grant")
}

// BenchmarkVsRedsyncSlowNodes: uncontended Lock+Unlock over five nodes of
// which two are 1 ms further away each way (a fault proxy delays what
// they receive and send), as in a deployment across zones: dlock's
// Redlock decides at a majority (the three near nodes) and releases
// without waiting for the far ones; redsync with its defaults waits for
// every node, and with WithFailFast(true) returns at a majority too.
func BenchmarkVsRedsyncSlowNodes(b *testing.B) {
	servers := redistest.StartN(b, 5)
	cs := redistest.Clients(b, servers)
	for i := 3; i < 5; i++ {
		p := etcdtest.ProxyTo(b, servers[i].Addr())
		p.DelayTx(time.Millisecond, 0)
		p.DelayRx(time.Millisecond, 0)
		c := goredis.NewClient(&goredis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
		b.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	for _, tc := range []struct {
		name string
		opts []redsync.Option
	}{{"default", nil}, {"failfast", []redsync.Option{redsync.WithFailFast(true)}}} {
		b.Run(tc.name, func(b *testing.B) {
			uncontended(b, redlockFn(b, cs, "bench/slow-"+tc.name), redsyncFn(cs, "anchor/slow-"+tc.name, tc.opts...), "redsync")
		})
	}
}

// BenchmarkClientCPUAsUsersMakeIt is the client side of
// BenchmarkVsRedislockAsUsersMakeIt: the same Lock+Unlock, each library
// alone in a loop, reporting the test process's CPU time per Lock+Unlock
// (getrusage: user and system, the Redis server not included) and its
// allocations. Loopback latency on a VM swings by 2-3× from run to run;
// the client's CPU per call does not.
func BenchmarkClientCPUAsUsersMakeIt(b *testing.B) {
	s := redistest.Start(b)
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	defer c.Close()
	m, err := redis.New(c, "bench/cpu", redis.WithTTL(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, l := range []struct {
		name string
		fn   lockFn
	}{
		{"dlock", lockerFn(b, m)},
		{"redislock", redislockAsUsers(c, "anchor/cpu")},
	} {
		b.Run(l.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				timeLockUnlock(b, ctx, l.fn)
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's CPU time so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReplicasCost: what replica confirmation costs. Uncontended
// Lock+Unlock on a master with one replica, dlock's Mutex with
// WithReplicas(1, 0) (the script and WAIT pipelined) against the same
// without, interleaved, on a client with go-redis' defaults.
func BenchmarkReplicasCost(b *testing.B) {
	master := redistest.Start(b, redistest.WithArgs("--repl-diskless-sync-delay", "0"))
	replica := redistest.Start(b, redistest.WithArgs("--replicaof", "127.0.0.1", fmt.Sprint(master.Port())))
	c := goredis.NewClient(&goredis.Options{Addr: master.Addr()})
	defer c.Close()
	ctx := context.Background()
	rc := replica.Client(b)
	for rc.Info(ctx, "replication").Val() == "" || !strings.Contains(rc.Info(ctx, "replication").Val(), "master_link_status:up") {
		select {
		case <-time.After(20 * time.Millisecond): // no notification of the link: poll
		case <-b.Context().Done():
			b.Fatal("the replica did not link up")
		}
	}
	confirmed, err := redis.New(c, "bench/replicas", redis.WithReplicas(1, 0))
	if err != nil {
		b.Fatal(err)
	}
	plain, err := redis.New(c, "bench/plain")
	if err != nil {
		b.Fatal(err)
	}
	ours, anchor := lockerFn(b, confirmed), lockerFn(b, plain)
	interleave(b, "replicas1", "plain", func(i int) (o, a time.Duration) {
		return alternate(i, func() time.Duration { return timeLockUnlock(b, ctx, ours) },
			func() time.Duration { return timeLockUnlock(b, ctx, anchor) })
	})
}
