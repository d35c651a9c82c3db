package redis_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/redis"
)

// slowRetry makes waiters poll so rarely (and the holder's TTL so long)
// that within a test only wake-ups move them.
var slowRetry = []redis.Option{redis.WithTTL(time.Minute), redis.WithRetry(30*time.Second, time.Minute)}

// queueWaiters starts n Locks on l, one at a time, each once the previous
// one is registered (waiting(i) reports that i are). Each granted waiter
// appends its index to the grant order, unlocks, and then reports on the
// returned channel (so that no Unlock outlives the test); order returns
// the grant order so far.
func queueWaiters(t *testing.T, ctx context.Context, l lock.Locker, n int, waiting func(int) bool) (done <-chan bool, order func() []int) {
	t.Helper()
	var mu sync.Mutex
	var granted []int
	c := make(chan bool, n)
	for i := range n {
		go func() {
			h, err := l.Lock(ctx)
			if !assert.NoError(t, err) {
				c <- false
				return
			}
			mu.Lock()
			granted = append(granted, i)
			mu.Unlock()
			c <- assert.NoError(t, h.Unlock(ctx))
		}()
		require.Eventually(t, func() bool { return waiting(i + 1) }, 10*time.Second, time.Millisecond, "waiter %d registered", i)
	}
	return c, func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(granted)
	}
}

// waitersAre reports whether the waiters key of the lock called name holds
// n waiters.
func waitersAre(ctx context.Context, c goredis.UniversalClient, name string, n int) bool {
	got, err := c.ZCard(ctx, "dlock:{"+name+"}:waiters").Result()
	return err == nil && got == int64(n)
}

// heldOnNode starts a node and returns a ctx bounded for the test, a
// slow-retry Mutex called name on it, a grant of it, and an admin client.
func heldOnNode(t *testing.T, name string) (context.Context, *redis.Mutex, lock.Held, goredis.UniversalClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	s := redistest.Start(t)
	m := newMutex(t, s.Client(t), name, slowRetry...)
	h, err := m.Lock(ctx)
	require.NoError(t, err)
	return ctx, m, h, s.Client(t)
}

// waitAll waits, bounded by ctx, for n reports on done.
func waitAll(t *testing.T, ctx context.Context, done <-chan bool, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-done:
		case <-ctx.Done():
			require.FailNow(t, "waiters not granted", "%d of %d", i, n)
		}
	}
}

// A release wakes one waiter: 8 registered waiters are granted one after
// the other, oldest first, with one acquire attempt each after the first
// release (a release that woke every waiter would cost 8+7+...+1 = 36;
// the Redlock control below shows that herd). The waiters key is gone
// at the end. On one node, through Sentinel, and on a Cluster (where the
// subscriber must sit on the lock's slot master for PUBLISH to count it).
func TestReleaseWakesOneWaiter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) goredis.UniversalClient
	}{
		{"node", func(t *testing.T) goredis.UniversalClient { return redistest.Start(t).Client(t) }},
		{"sentinel", func(t *testing.T) goredis.UniversalClient { return redistest.StartSentinel(t).Client(t) }},
		{"cluster", func(t *testing.T) goredis.UniversalClient { return redistest.StartCluster(t, 3).Client(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) { testWakeOne(t, tc.client(t)) })
	}
}

func testWakeOne(t *testing.T, c goredis.UniversalClient) {
	const waiters = 8
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var count acquireCounter
	c.AddHook(&count)
	m := newMutex(t, c, "wake/one", slowRetry...)
	h, err := m.Lock(ctx)
	require.NoError(t, err)
	done, order := queueWaiters(t, ctx, m, waiters, func(n int) bool { return waitersAre(ctx, c, "wake/one", n) })
	before := count.n.Load()
	require.NoError(t, h.Unlock(ctx))
	waitAll(t, ctx, done, waiters)
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, order(), "granted oldest first")
	require.NoError(t, redis.Drain(ctx))
	assert.Equal(t, int64(waiters), count.n.Load()-before, "acquire attempts after the first release: one per grant")
	for _, k := range []string{"dlock:{wake/one}:waiters", "dlock:{wake/one}"} {
		n, err := c.Exists(ctx, k).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "%s is gone", k)
	}
}

// The control: a Redlock release wakes every waiter (broadcast), so the
// same 8 waiters cost more than one attempt per grant (counted on one of
// its three nodes). The waiters poll too, every 100 ms at most: when the
// woken waiters split the nodes and none is granted, their failed attempts
// wake nobody, and only a poll moves them on.
func TestRedlockReleaseWakesEveryWaiter(t *testing.T) {
	t.Parallel()
	const waiters = 8
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	servers := redistest.StartN(t, 3)
	clients := redistest.Clients(t, servers)
	var count acquireCounter
	clients[0].(*goredis.Client).AddHook(&count)
	r, err := redis.NewRedlock(clients, "wake/all", redis.WithTTL(time.Minute), redis.WithRetry(20*time.Millisecond, 100*time.Millisecond))
	require.NoError(t, err)
	h, err := r.Lock(ctx)
	require.NoError(t, err)
	admin := servers[0].Client(t)
	held := count.n.Load()
	done, _ := queueWaiters(t, ctx, r, waiters, func(n int) bool {
		subs, err := admin.PubSubNumSub(ctx, "dlock:{wake/all}:released").Result()
		// Subscribed, and its second attempt (after subscribing) made.
		return err == nil && subs["dlock:{wake/all}:released"] == int64(n) && count.n.Load() >= held+int64(2*n)
	})
	before := count.n.Load()
	require.NoError(t, h.Unlock(ctx))
	waitAll(t, ctx, done, waiters)
	require.NoError(t, redis.Drain(ctx))
	assert.Greater(t, count.n.Load()-before, int64(waiters), "a broadcast wakes every waiter: more attempts than grants")
	t.Logf("Redlock: %d attempts for %d grants", count.n.Load()-before, waiters)
}

// A waiter that gives up leaves the waiters and, if the lock is free,
// wakes the next: here the lock key vanishes without a release (as at an
// expiry: nobody is woken), the first waiter gives up, and the second is
// granted at once rather than at its next poll (30 s away).
func TestWaiterLeavesAndWakesNext(t *testing.T) {
	t.Parallel()
	ctx, m, h, admin := heldOnNode(t, "wake/leave")
	registered := func(n int) func() bool {
		return func() bool { return waitersAre(ctx, admin, "wake/leave", n) }
	}
	firstCtx, giveUp := context.WithCancel(ctx)
	first := make(chan error, 1)
	go func() {
		_, err := m.Lock(firstCtx)
		first <- err
	}()
	require.Eventually(t, registered(1), 10*time.Second, time.Millisecond)
	second := make(chan lock.Held, 1)
	go func() {
		g, err := m.Lock(ctx)
		assert.NoError(t, err)
		second <- g
	}()
	require.Eventually(t, registered(2), 10*time.Second, time.Millisecond)

	require.NoError(t, admin.Del(ctx, "dlock:{wake/leave}").Err()) // no release, no wake-up
	giveUp()
	require.ErrorIs(t, <-first, context.Canceled)
	select {
	case g := <-second:
		require.NotNil(t, g)
		require.NoError(t, g.Unlock(ctx))
	case <-ctx.Done():
		require.FailNow(t, "the second waiter was not woken when the first left")
	}
	assert.ErrorIs(t, h.Unlock(ctx), lock.ErrLockLost, "the holder's key was deleted")
	require.NoError(t, redis.Drain(ctx))
	n, err := admin.Exists(ctx, "dlock:{wake/leave}:waiters").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "no waiters key left")
}

// A release skips waiters that nobody listens for (a process that died
// while registered): they are removed, and the next live waiter is woken.
func TestReleaseSkipsGoneWaiters(t *testing.T) {
	t.Parallel()
	ctx, m, h, admin := heldOnNode(t, "wake/gone")
	for i := range 3 { // three dead waiters ahead of the live one
		require.NoError(t, admin.ZAdd(ctx, "dlock:{wake/gone}:waiters", goredis.Z{Score: float64(i + 1), Member: fmt.Sprintf("dead%d", i)}).Err())
	}
	done, _ := queueWaiters(t, ctx, m, 1, func(int) bool { return waitersAre(ctx, admin, "wake/gone", 4) })
	require.NoError(t, h.Unlock(ctx))
	waitAll(t, ctx, done, 1) // the live waiter behind three gone ones was woken
	require.NoError(t, redis.Drain(ctx))
	n, err := admin.Exists(ctx, "dlock:{wake/gone}:waiters").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the gone waiters were removed")
}

// acquireCounter is a go-redis hook that counts dlock's acquire attempts:
// the Mutex's, EVALSHA calls of its acquire script (and its EVAL, if the
// script had to be loaded); the Redlock's, SET NX of a dlock key.
type acquireCounter struct{ n atomic.Int64 }

func (*acquireCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (*acquireCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (a *acquireCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		args := cmd.Args()
		if len(args) > 1 && (cmd.Name() == "evalsha" && args[1] == redis.AcquireScriptHash || cmd.Name() == "eval" && args[1] == redis.AcquireScriptSrc ||
			cmd.Name() == "set" && slices.Contains(args, any("nx")) && strings.HasPrefix(fmt.Sprint(args[1]), redis.DefaultPrefix)) {
			a.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// A Redlock attempt that fails deletes the key it set on a node without
// publishing a release: a failed attempt frees no lock, and a wake-up
// would send every waiter at the lock at once. Nodes 1 and 2 hold a
// foreign value, so TryLock gets node 0 only; the test subscribes to the
// release channel on each node first, publishes its own marker once the
// attempt's key is gone, and the marker must be the first message on
// every node. Node 0's grant arrives before the refusals decide the round
// (the failed round deletes it), or after TryLock returned (its late
// reply deletes it). The control: a grant's Unlock still publishes.
func TestRedlockFailedAttemptWakesNobody(t *testing.T) {
	t.Parallel()
	for _, late := range []bool{false, true} {
		t.Run(map[bool]string{false: "answered", true: "late"}[late], func(t *testing.T) { testFailedAttemptQuiet(t, late) })
	}
}

func testFailedAttemptQuiet(t *testing.T, late bool) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const name = "wake/failed"
	key := redis.DefaultPrefix + "{" + name + "}"
	channel := key + ":released"
	servers := redistest.StartN(t, 3)
	admins := redistest.Clients(t, servers)
	subs := make([]*goredis.PubSub, len(servers))
	for i, c := range admins {
		ps := c.Subscribe(ctx, channel)
		t.Cleanup(func() { _ = ps.Close() })
		msg, err := ps.Receive(ctx)
		require.NoError(t, err, "subscribe on node %d", i)
		require.IsType(t, &goredis.Subscription{}, msg, "node %d", i)
		subs[i] = ps
	}
	for _, c := range admins[1:] {
		require.NoError(t, c.Set(ctx, key, "foreign", time.Minute).Err())
	}

	// Order the SETs with hooks: node 0's reply before the other nodes'
	// SETs are sent, or node 0's SET only once TryLock returned. The long
	// node timeout keeps the held SETs from timing out.
	clients := redistest.Clients(t, servers)
	node0 := make(chan bool, 1) // node 0's SET reply: granted or not
	tried := make(chan struct{})
	answered := make(chan struct{})
	if late {
		clients[0].AddHook(&setGate{key: key, wait: tried, replied: node0})
	} else {
		clients[0].AddHook(&setGate{key: key, replied: node0, after: answered})
		for _, c := range clients[1:] {
			c.AddHook(&setGate{key: key, wait: answered})
		}
	}
	r, err := redis.NewRedlock(clients, name, redis.WithTTL(time.Minute), redis.WithNodeTimeout(10*time.Second))
	require.NoError(t, err)
	drainAtEnd(t)

	_, err = r.TryLock(ctx)
	close(tried)
	require.ErrorIs(t, err, lock.ErrLocked, "TryLock against a foreign value on 2 of 3 nodes")
	require.ErrorIs(t, err, redis.ErrNoQuorum)
	select {
	case granted := <-node0:
		require.True(t, granted, "the attempt set its key on node 0")
	case <-ctx.Done():
		require.FailNow(t, "node 0 did not answer the attempt's SET")
	}
	drain(t) // the late reply's delete runs in the background
	n, err := admins[0].Exists(ctx, key).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the failed attempt's key on node 0 is gone")

	firstMessages := func(want string) {
		t.Helper()
		for i, ps := range subs {
			msg, err := ps.ReceiveMessage(ctx)
			require.NoError(t, err, "node %d", i)
			require.Equal(t, want, msg.Payload, "node %d: the first message on %s", i, channel)
		}
	}
	for _, c := range admins {
		require.NoError(t, c.Publish(ctx, channel, "marker").Err())
	}
	firstMessages("marker")

	// The control: a grant's Unlock publishes on each node it deletes from.
	for _, c := range admins[1:] {
		require.NoError(t, c.Del(ctx, key).Err())
	}
	h, err := r.TryLock(ctx)
	require.NoError(t, err)
	require.NoError(t, h.Unlock(ctx))
	drain(t)
	firstMessages("1")
}

// setGate is a go-redis hook on the SETs of key: each waits until wait (if
// not nil) is closed or its ctx ends, and its reply (granted or not) is
// sent to replied (if not nil, and if it has room), after which after (if
// not nil) is closed.
type setGate struct {
	key     string
	wait    <-chan struct{}
	replied chan<- bool
	after   chan struct{}
	once    sync.Once
}

func (*setGate) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (*setGate) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

func (g *setGate) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if args := cmd.Args(); cmd.Name() != "set" || len(args) < 2 || args[1] != g.key {
			return next(ctx, cmd)
		}
		if g.wait != nil {
			select {
			case <-g.wait:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		err := next(ctx, cmd)
		if g.replied != nil {
			granted := false
			if b, ok := cmd.(*goredis.BoolCmd); ok {
				granted = err == nil && b.Val()
			}
			select {
			case g.replied <- granted:
			default:
			}
		}
		if g.after != nil {
			g.once.Do(func() { close(g.after) })
		}
		return err
	}
}
