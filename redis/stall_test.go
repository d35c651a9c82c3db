package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/redis"
)

// drain waits, bounded, for the background work on clients (on every
// client, if none is given).
func drain(t testing.TB, clients ...goredis.UniversalClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
	defer cancel()
	require.NoError(t, redis.Drain(ctx, clients...), "stragglers did not end")
}

// drainAtEnd drains when t ends, before the clients are closed (so
// register it after them).
func drainAtEnd(t *testing.T, clients ...goredis.UniversalClient) {
	t.Cleanup(func() { drain(t, clients...) })
}

// defaultClients returns one client with go-redis' default options
// (ContextTimeoutEnabled false) per server.
func defaultClients(t *testing.T, servers []*redistest.Server) []goredis.UniversalClient {
	clients := make([]goredis.UniversalClient, len(servers))
	for i, s := range servers {
		clients[i] = s.DefaultClient(t)
	}
	return clients
}

// keyCount returns how many of the servers hold the lock key of name.
func keyCount(ctx context.Context, t *testing.T, servers []*redistest.Server, name string) int {
	t.Helper()
	n := 0
	for i, s := range servers {
		c, err := s.Client(t).Exists(ctx, redis.DefaultPrefix+"{"+name+"}").Result()
		require.NoError(t, err, "node %d", i)
		n += int(c)
	}
	return n
}

// TestRedlockStalledNode: over 5 nodes with default-option clients, one
// node stopped with SIGSTOP (it accepts connections and answers nothing)
// does not hold up the acquire: it returns with a valid grant, decided by
// the 4 live nodes; exclusion holds; Unlock returns without the stalled
// node. After SIGCONT the stalled node runs the queued SET and release in
// some order, and its straggler deletes what its late SET left.
func TestRedlockStalledNode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const name = "stalled"
	servers := redistest.StartN(t, 5)
	clients := defaultClients(t, servers)
	r, err := redis.NewRedlock(clients, name, redis.WithTTL(10*time.Second))
	require.NoError(t, err, "default-option clients are accepted")
	drainAtEnd(t)
	other, err := redis.NewRedlock(defaultClients(t, servers), name, redis.WithTTL(10*time.Second))
	require.NoError(t, err)
	drainAtEnd(t)

	// Warm the connection pools, so that the stall hits a command, not a dial.
	h, err := r.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, h.Unlock(ctx))

	servers[2].Pause()
	defer servers[2].Resume()
	start := time.Now()
	h, err = r.Lock(ctx)
	took := time.Since(start)
	require.NoError(t, err, "Lock with one of five nodes stalled")
	g := h.(*redis.Grant)
	assert.NoError(t, g.Err(), "the grant is valid when Lock returns")
	assert.True(t, time.Now().Before(g.Deadline()), "Lock returned while the grant is still valid")
	t.Logf("acquire with a stalled node took %v (node timeout %v, validity %v)", took, redis.DefaultNodeTimeout, 10*time.Second)

	_, err = other.TryLock(ctx)
	assert.ErrorIs(t, err, lock.ErrLocked, "exclusion holds on the live nodes")

	start = time.Now()
	require.NoError(t, h.Unlock(ctx), "Unlock on the 4 live nodes")
	t.Logf("release with a stalled node took %v", time.Since(start))

	servers[2].Resume()
	drain(t)
	drain(t)
	assert.Zero(t, keyCount(ctx, t, servers, name), "no node keeps a key, the stalled one included")
}

// TestRedlockLateGrantAfterFailure: an acquire that fails (two nodes held
// by another grant, one stalled) returns after the node timeout; when the
// stalled node resumes, a second later, its SET lands on a free key, and
// the delete that followed the unanswered SET, still waiting for the
// node, deletes it.
func TestRedlockLateGrantAfterFailure(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const name = "late"
	servers := redistest.StartN(t, 5)
	r, err := redis.NewRedlock(defaultClients(t, servers), name, redis.WithTTL(10*time.Second))
	require.NoError(t, err)
	drainAtEnd(t)
	h, err := r.Lock(ctx) // warm the pools
	require.NoError(t, err)
	require.NoError(t, h.Unlock(ctx))
	// Unlock returns once a majority deleted; a delete still on its way
	// leaves that node held by the warm-up's grant (a CI run saw "held by
	// another grant on 3", and no wait for the stalled node). Every node
	// free first.
	drain(t)

	key := redis.DefaultPrefix + "{" + name + "}"
	for _, i := range []int{0, 1} {
		require.NoError(t, servers[i].Client(t).Set(ctx, key, "someone-else", time.Minute).Err())
	}
	servers[4].Pause()
	defer servers[4].Resume()
	_, err = r.TryLock(ctx)
	require.ErrorIs(t, err, redis.ErrNoQuorum, "2 held elsewhere, 2 granted, 1 stalled")
	assert.ErrorIs(t, err, lock.ErrLocked)
	assert.ErrorContains(t, err, "node timeout", "the stalled node is reported")

	// The fault itself: node 4 stays stopped for five node timeouts more,
	// as a paused VM would; the delete that follows its unanswered SET
	// must outlast that.
	stopped := time.NewTimer(5 * redis.DefaultNodeTimeout)
	select {
	case <-stopped.C:
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	servers[4].Resume()
	drain(t)
	assert.Equal(t, 2, keyCount(ctx, t, servers, name), "only the other grant's keys remain: the late SET was deleted")
	for _, i := range []int{2, 3, 4} {
		n, err := servers[i].Client(t).Exists(ctx, key).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "node %d", i)
	}
}

// TestRedlockLateGrantWhileHeld: a node that answers the acquire after
// Lock returned, while the grant is held, keeps its key (the grant may
// well be extended there), and Unlock deletes it with the others. Unlock
// sends its deletes only to the nodes that have answered the acquire, so
// a late answer during the hold must count as one: were it dropped, the
// resumed node would keep the key until its TTL.
func TestRedlockLateGrantWhileHeld(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const name = "late-held"
	servers := redistest.StartN(t, 5)
	r, err := redis.NewRedlock(defaultClients(t, servers), name, redis.WithTTL(time.Minute))
	require.NoError(t, err)
	drainAtEnd(t)
	h, err := r.Lock(ctx) // warm the pools
	require.NoError(t, err)
	require.NoError(t, h.Unlock(ctx))
	drain(t)

	servers[3].Pause()
	defer servers[3].Resume()
	h, err = r.Lock(ctx)
	require.NoError(t, err, "granted by the 4 live nodes")
	servers[3].Resume()
	drain(t) // node 3's SET answers while the grant is held
	require.Equal(t, 5, keyCount(ctx, t, servers, name), "the late SET landed and is kept while held")

	require.NoError(t, h.Unlock(ctx))
	drain(t)
	assert.Zero(t, keyCount(ctx, t, servers, name), "Unlock deleted the late node's key too")
}

// TestRedlockUnlockCountsNodesStillOut: Unlock skips the nodes whose
// acquire is still out (they delete their own late SET) and counts them as
// nodes where the grant is gone, so that with the grant also gone by hand
// on two of the three nodes that granted, Unlock reports the lock lost,
// not merely no quorum.
func TestRedlockUnlockCountsNodesStillOut(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const name = "still-out"
	servers := redistest.StartN(t, 5)
	r, err := redis.NewRedlock(defaultClients(t, servers), name, redis.WithTTL(time.Minute))
	require.NoError(t, err)
	drainAtEnd(t)
	h, err := r.Lock(ctx) // warm the pools
	require.NoError(t, err)
	require.NoError(t, h.Unlock(ctx))
	drain(t)

	for _, i := range []int{3, 4} {
		servers[i].Pause()
		defer servers[i].Resume()
	}
	h, err = r.Lock(ctx)
	require.NoError(t, err, "granted by nodes 0, 1 and 2")
	key := redis.DefaultPrefix + "{" + name + "}"
	for _, i := range []int{0, 1} {
		require.NoError(t, servers[i].Client(t).Del(ctx, key).Err())
	}
	err = h.Unlock(ctx)
	assert.ErrorIs(t, err, redis.ErrLockLost, "gone on 0 and 1, and never kept on 3 and 4: a majority")
	if qc, ok := redis.QuorumOf(err); assert.True(t, ok) {
		// Decided once the gone count passed N − quorum: node 2 (and one
		// of 0 and 1) may not have answered by then.
		assert.Greater(t, qc.Held, qc.Nodes-qc.Quorum, "the two nodes still out count as gone")
		assert.LessOrEqual(t, qc.OK, 1)
	}

	for _, i := range []int{3, 4} {
		servers[i].Resume()
	}
	drain(t)
	assert.Zero(t, keyCount(ctx, t, servers, name), "the resumed nodes deleted their late SETs")
}

// TestMutexStalledNode: on a stopped node, Lock, TryLock and Unlock return
// soon after their ctx ends (a deadline, or a cancellation without one),
// with an error matching ctx.Err(), long before go-redis' ReadTimeout
// (5s) would end the command; after SIGCONT no key is left. With a
// default-option client the commands run in goroutines that the caller
// stops waiting for (stragglers, which delete a late grant when they
// complete); with a client that honours ctx deadlines they run in the
// caller's goroutine, capped at the node timeout, and go-redis gives up
// on the node itself.
func TestMutexStalledNode(t *testing.T) {
	t.Parallel()
	clients := map[string]func(*redistest.Server, testing.TB) goredis.UniversalClient{
		"default client":  (*redistest.Server).DefaultClient,
		"deadline client": (*redistest.Server).Client,
	}
	ctxs := map[string]func(context.Context) (context.Context, context.CancelFunc){
		"deadline": func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 100*time.Millisecond)
		},
		"cancel": func(ctx context.Context) (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(ctx)
			stop := time.AfterFunc(100*time.Millisecond, cancel)
			return ctx, func() { stop.Stop(); cancel() }
		},
	}
	for cname, client := range clients {
		for xname, newCtx := range ctxs {
			t.Run(cname+"/"+xname, func(t *testing.T) { testMutexStalledNode(t, client, newCtx) })
		}
	}
}

func testMutexStalledNode(t *testing.T, client func(*redistest.Server, testing.TB) goredis.UniversalClient, newCtx func(context.Context) (context.Context, context.CancelFunc)) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const name = "stalled"
	s := redistest.Start(t)
	m := newMutex(t, client(s, t), name, redis.WithTTL(10*time.Second))
	drainAtEnd(t)
	h, err := m.Lock(ctx) // warm the pool
	require.NoError(t, err)
	require.NoError(t, h.Unlock(ctx))
	key := redis.DefaultPrefix + "{" + name + "}"

	// returns runs f with a short ctx while the node is stopped and checks
	// that it returns ctx's error before go-redis' ReadTimeout could have
	// ended the command: the caller did not wait on the node.
	returns := func(what string, f func(ctx context.Context) error) {
		t.Helper()
		fctx, fcancel := newCtx(ctx)
		defer fcancel()
		got := make(chan error, 1)
		start := time.Now()
		go func() { got <- f(fctx) }()
		select {
		case err := <-got:
			require.Error(t, fctx.Err(), "%s returned before its ctx ended: %v", what, err)
			assert.ErrorIs(t, err, fctx.Err(), what)
			t.Logf("%s on a stalled node returned after %v: %v", what, time.Since(start), err)
		case <-time.After(2 * time.Second): // < ReadTimeout (5s)
			t.Fatalf("%s did not return when its ctx ended: it waits on the stalled node", what)
		}
	}

	s.Pause()
	defer s.Resume()
	returns("Lock", func(ctx context.Context) error { _, err := m.Lock(ctx); return err })
	returns("TryLock", func(ctx context.Context) error { _, err := m.TryLock(ctx); return err })
	s.Resume()
	drain(t)
	n, err := s.Client(t).Exists(ctx, key).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the late grants were deleted")

	h, err = m.Lock(ctx)
	require.NoError(t, err)
	s.Pause()
	returns("Unlock", h.Unlock)
	s.Resume()
	drain(t)
	// A straggler's release settles the grant (Unlock then reports it
	// released); a release that go-redis gave up on ran when the node
	// resumed, and Unlock's retry finds the key gone.
	err = h.Unlock(ctx)
	if err != nil {
		assert.ErrorIs(t, err, lock.ErrLockLost)
	}
	n, err = s.Client(t).Exists(ctx, key).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the late release deleted the key")
}

// TestRedlockReleaseOutlivesCallerCtx: Unlock decides at a majority and
// returns; the caller then cancels its ctx, as every caller does (defer
// cancel()). The release on the node that had not answered yet still
// runs: a node's request is bounded by the node timeout, not by the
// caller's ctx. Node 2's client has one connection, held by a BLPOP, so
// that its release is still waiting for a connection when Unlock returns.
// With the node requests bounded by the caller's ctx (as before) it fails:
// go-redis drops a command still waiting for a connection when its ctx
// ends, and node 2 keeps the key until its TTL (CI saw that in
// TestRunRedlock).
func TestRedlockReleaseOutlivesCallerCtx(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const name = "outlives"
	servers := redistest.StartN(t, 3)
	clients := defaultClients(t, servers)
	one := goredis.NewClient(&goredis.Options{Addr: servers[2].Addr(), PoolSize: 1, PoolTimeout: 30 * time.Second})
	t.Cleanup(func() { one.Close() })
	clients[2] = one
	r, err := redis.NewRedlock(clients, name, redis.WithTTL(time.Minute))
	require.NoError(t, err)
	drainAtEnd(t)

	h, err := r.Lock(ctx)
	require.NoError(t, err)
	drain(t) // Lock returned at a majority: let the third SET land
	require.Equal(t, 3, keyCount(ctx, t, servers, name))

	// Hold node 2's only connection in a BLPOP until the push below.
	blocked := make(chan error, 1)
	go func() { blocked <- one.BLPop(context.WithoutCancel(ctx), 0, "outlives-gate").Err() }()
	admin := servers[2].Client(t)
	require.Eventually(t, func() bool {
		info, err := admin.Info(ctx, "clients").Result()
		return err == nil && strings.Contains(info, "blocked_clients:1")
	}, 10*time.Second, 5*time.Millisecond, "the BLPOP holds node 2's connection")

	uctx, ucancel := context.WithCancel(ctx)
	require.NoError(t, h.Unlock(uctx), "released on nodes 0 and 1")
	ucancel()
	require.NoError(t, admin.LPush(ctx, "outlives-gate", "go").Err())
	require.NoError(t, <-blocked)
	drain(t)
	assert.Zero(t, keyCount(ctx, t, servers, name), "node 2's release ran after the caller's ctx ended")
}

// stoppable is a lock's client with the node that serves its lock: stop
// and resume pause that node's process (SIGSTOP, SIGCONT).
type stoppable struct {
	client goredis.UniversalClient
	server *redistest.Server
}

// TestNodeTimeoutBoundsCommands: on every kind of go-redis client, with or
// without ContextTimeoutEnabled, a Mutex's TryLock on a stopped node fails
// by the node timeout although its ctx has a minute left, and once the
// node resumes no key is left (the delete that follows the unanswered
// acquire reached it). The control is a client that dlock cannot bound
// (a Ring without ContextTimeoutEnabled): its TryLock waits for the node.
func TestNodeTimeoutBoundsCommands(t *testing.T) {
	t.Parallel()
	const name = "capped"
	key := redis.DefaultPrefix + "{" + name + "}"
	plain := func(deadlines bool) func(t *testing.T) stoppable {
		return func(t *testing.T) stoppable {
			s := redistest.Start(t)
			if deadlines {
				return stoppable{s.Client(t), s}
			}
			return stoppable{s.DefaultClient(t), s}
		}
	}
	sentinel := func(t *testing.T) stoppable {
		st := redistest.StartSentinel(t)
		c := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: st.MasterName, SentinelAddrs: st.Addrs()})
		t.Cleanup(func() { _ = c.Close() })
		return stoppable{c, st.Master}
	}
	cluster := func(deadlines bool) func(t *testing.T) stoppable {
		return func(t *testing.T) stoppable {
			cl := redistest.StartCluster(t, 3)
			c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: deadlines})
			t.Cleanup(func() { _ = c.Close() })
			m, err := c.MasterForKey(t.Context(), key)
			require.NoError(t, err)
			for _, s := range cl.Nodes {
				if s.Addr() == m.Options().Addr {
					return stoppable{c, s}
				}
			}
			require.FailNow(t, "no node serves the key's slot", "%s", m.Options().Addr)
			return stoppable{}
		}
	}
	for _, tc := range []struct {
		name    string
		start   func(t *testing.T) stoppable
		bounded bool
	}{
		{"client", plain(true), true},
		{"default client", plain(false), true},
		{"default sentinel client", sentinel, true},
		{"cluster client", cluster(true), true},
		{"default cluster client", cluster(false), true},
		{"control: default ring", func(t *testing.T) stoppable {
			s := redistest.Start(t)
			c := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"only": s.Addr()}})
			t.Cleanup(func() { _ = c.Close() })
			return stoppable{c, s}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			st := tc.start(t)
			drainAtEnd(t, st.client)
			m := newMutex(t, st.client, name, redis.WithNodeTimeout(100*time.Millisecond))
			h, err := m.TryLock(ctx) // warm the pool
			require.NoError(t, err)
			require.NoError(t, h.Unlock(ctx))

			st.server.Pause()
			defer st.server.Resume()
			type result struct {
				h   lock.Held
				err error
			}
			got := make(chan result, 1)
			go func() { h, err := m.TryLock(ctx); got <- result{h, err} }()
			var r result
			select {
			case r = <-got:
				if !tc.bounded {
					t.Fatalf("the control returned while the node is stopped: %v", r.err)
				}
				require.Error(t, r.err)
				assert.Contains(t, r.err.Error(), "no reply within the node timeout (100ms)")
				assert.NoError(t, ctx.Err(), "the caller's ctx is still live")
			case <-time.After(2 * time.Second): // < ReadTimeout (3s)
				if tc.bounded {
					t.Fatal("TryLock waited on the stalled node past its node timeout")
				}
			}
			st.server.Resume()
			if !tc.bounded {
				select {
				case r = <-got:
					t.Logf("the control's TryLock returned once the node resumed: %v", r.err)
				case <-time.After(10 * time.Second):
					t.Fatal("the control's TryLock did not return after the node resumed")
				}
			}
			if r.h != nil { // the control may be granted once the node resumes
				require.NoError(t, r.h.Unlock(ctx))
			}
			drain(t, st.client)
			n, err := st.client.Exists(ctx, key).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "no key left after the node resumed")
		})
	}
}
