package redis_test

import (
	"context"
	"net"
	"strconv"
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

// TestReplicasClients: WithReplicas (WAIT) runs on the clients it accepts,
// a failover client (a *goredis.Client) and a cluster client (WAIT on the
// key's master), and refuses the others.
func TestReplicasClients(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	st := redistest.StartSentinel(t)
	m := newMutex(t, st.Client(t), "wait", redis.WithReplicas(1, 5*time.Second))
	drainAtEnd(t)
	h, err := m.TryLock(ctx)
	require.NoError(t, err, "the sentinel setup's replica acknowledges")
	require.NoError(t, h.Unlock(ctx))

	cl := redistest.StartCluster(t, 3)
	m = newMutex(t, cl.Client(t), "wait", redis.WithReplicas(1, 50*time.Millisecond))
	drainAtEnd(t)
	_, err = m.TryLock(ctx)
	assert.ErrorIs(t, err, redis.ErrNotReplicated, "the cluster's masters have no replicas: WAIT ran and counted none")
	n, err := cl.Client(t).Exists(ctx, redis.DefaultPrefix+"{wait}").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the unacknowledged grant was released")

	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": st.Master.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	_, err = redis.New(ring, "wait", redis.WithReplicas(1, 0))
	assert.ErrorIs(t, err, redis.ErrInvalidOption, "WAIT needs one connection to the key's master")
	assert.ErrorContains(t, err, "replicas")
}

// TestSentinelFailoverDoubleGrant shows why a Mutex says SurvivesFailover
// false: replication to the replica is cut (its link blackholed, so
// neither side notices), A is granted on the master, and a Sentinel
// failover promotes the replica, which never saw A's grant. B, on a
// failover client, is then granted the same lock while A's grant is still
// valid, and with the same token: the counter's last INCR was lost too.
func TestSentinelFailoverDoubleGrant(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st := redistest.StartSentinel(t)
	a := newMutex(t, st.Client(t), "failover", redis.WithTTL(30*time.Second))
	drainAtEnd(t)

	// A first grant that did replicate: the counter is on both nodes.
	h0, err := a.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, h0.Unlock(ctx))
	acks, err := st.Master.Client(t).(*goredis.Client).Wait(ctx, 1, 10*time.Second).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), acks, "the replica is in sync")

	st.Link.Blackhole()
	ha, err := a.Lock(ctx)
	require.NoError(t, err)
	require.Equal(t, h0.Token().Seq+1, ha.Token().Seq)

	st.Failover(t)
	b := newMutex(t, st.Client(t), "failover", redis.WithTTL(30*time.Second))
	drainAtEnd(t)
	hb, err := b.TryLock(ctx)
	require.NoError(t, err, "the promoted replica grants the lock again")
	select {
	case <-ha.Done():
		t.Fatal("A's grant ended before B's: no overlap shown")
	default:
	}
	assert.Equal(t, ha.Token(), hb.Token(), "the token was handed out twice")
	t.Logf("two holders after a Sentinel failover: A %v (old master), B %v (promoted replica)", ha.Token(), hb.Token())
	require.NoError(t, hb.Unlock(ctx))
	err = ha.Unlock(ctx)
	if err != nil {
		assert.ErrorIs(t, err, lock.ErrLockLost, "A's key is not on the new master")
	}
}

// TestSentinelFailoverWithReplicas is TestSentinelFailoverDoubleGrant
// with WithReplicas(1, ...): once replication is cut, A's grant cannot be
// confirmed, so TryLock fails with ErrNotReplicated and leaves no key, and
// nobody holds the lock when the failover promotes the replica; B is then
// granted once, with a token above every token a holder had. A grant
// confirmed before the cut is on the promoted replica: it still holds the
// lock there.
func TestSentinelFailoverWithReplicas(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st := redistest.StartSentinel(t)
	a := newMutex(t, st.Client(t), "failover", redis.WithTTL(30*time.Second), redis.WithReplicas(1, 2*time.Second))
	drainAtEnd(t)

	// A confirmed grant, held across the failover.
	h0, err := a.TryLock(ctx)
	require.NoError(t, err, "the replica acknowledges")
	// Another name, confirmed before the cut and held across the failover.
	held, err := newMutex(t, st.Client(t), "held", redis.WithTTL(30*time.Second), redis.WithReplicas(1, 2*time.Second)).TryLock(ctx)
	require.NoError(t, err)
	require.NoError(t, h0.Unlock(ctx))
	// A release is not confirmed: without this WAIT the replica might still
	// have h0's key when it is promoted (docs/redis.md).
	acks, err := st.Master.Client(t).(*goredis.Client).Wait(ctx, 1, 10*time.Second).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), acks, "the replica has the release")

	st.Link.Blackhole()
	short := newMutex(t, st.Client(t), "failover", redis.WithTTL(30*time.Second), redis.WithReplicas(1, 200*time.Millisecond))
	_, err = short.TryLock(ctx)
	require.ErrorIs(t, err, redis.ErrNotReplicated, "the cut replica cannot acknowledge")

	st.Failover(t)
	// The promoted replica has no replica of its own until Sentinel makes
	// the old master one: read the state after the failover without
	// confirmation.
	b := newMutex(t, st.Client(t), "failover", redis.WithTTL(30*time.Second))
	hb, err := b.TryLock(ctx)
	require.NoError(t, err, "nobody held the lock: A's unconfirmed grant was never one")
	assert.Greater(t, hb.Token().Seq, h0.Token().Seq, "no token a holder had is issued again")
	require.NoError(t, hb.Unlock(ctx))
	_, err = newMutex(t, st.Client(t), "held", redis.WithTTL(30*time.Second)).TryLock(ctx)
	assert.ErrorIs(t, err, redis.ErrLocked, "a grant confirmed before the cut is held on the promoted replica")
	select {
	case <-held.Done():
		t.Fatal("the confirmed grant ended before the check")
	default:
	}
	require.NoError(t, held.Unlock(ctx), "its key is on the new master")
}

// writeCounter counts the writes on the connections it dials: a client
// sends each command, or each pipeline, in one write, and waits for the
// reply before the next one, so writes count round trips.
type writeCounter struct{ writes atomic.Int64 }

func (w *writeCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return countedConn{c, w}, nil
}

type countedConn struct {
	net.Conn
	w *writeCounter
}

func (c countedConn) Write(p []byte) (int, error) {
	c.w.writes.Add(1)
	return c.Conn.Write(p)
}

// TestReplicaCannotAcknowledge: with WithReplicas, the acquire script and
// WAIT go in one round trip (one pipeline, no single command). While the
// only replica is paused (SIGSTOP), TryLock fails with ErrNotReplicated and
// leaves no key behind, and Lock goes on retrying; once the replica
// resumes, Lock is granted.
func TestReplicaCannotAcknowledge(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	master := redistest.Start(t, redistest.WithArgs("--repl-diskless-sync-delay", "0"))
	replica := redistest.Start(t, redistest.WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(master.Port())))
	waitReplicaUp(ctx, t, replica.Client(t))
	// go-redis' defaults, but for a dialer that counts writes.
	wc := &writeCounter{}
	c := goredis.NewClient(&goredis.Options{Addr: master.Addr(), Dialer: wc.dial})
	defer c.Close()
	require.NoError(t, c.Ping(ctx).Err()) // a connection, dialled and set up
	drainAtEnd(t, c)
	key := redis.DefaultPrefix + "{paused}"

	// A long WAIT timeout while the replica runs (a loaded machine may
	// delay its acknowledgement); a short one once it is paused.
	live := newMutex(t, c, "paused", redis.WithReplicas(1, 10*time.Second))
	for i := range 2 { // the first sends the script (EVALSHA finds none), then it is cached
		w0 := wc.writes.Load()
		h, err := live.TryLock(ctx)
		require.NoError(t, err, "the replica acknowledges")
		if i == 1 {
			assert.Equal(t, int64(1), wc.writes.Load()-w0, "the script and WAIT: one round trip")
		}
		require.NoError(t, h.Unlock(ctx))
	}

	m := newMutex(t, c, "paused", redis.WithReplicas(1, 200*time.Millisecond))
	replica.Pause()
	t.Cleanup(replica.Resume)
	_, err := m.TryLock(ctx)
	require.ErrorIs(t, err, redis.ErrNotReplicated)
	n, err := c.Exists(ctx, key).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the unacknowledged grant was released")

	// Lock goes on retrying while the replica is paused: it has not
	// returned after several attempts (each one WAIT's 200 ms).
	got := make(chan error, 1)
	w1 := wc.writes.Load()
	go func() {
		h, err := m.Lock(ctx)
		if err == nil {
			err = h.Unlock(ctx)
		}
		got <- err
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for wc.writes.Load()-w1 < 6 { // three attempts and their releases
		select {
		case err := <-got:
			t.Fatalf("Lock returned while the replica was paused: %v", err)
		case <-tick.C: // the count has no notification: poll it
		}
	}
	select {
	case err := <-got:
		t.Fatalf("Lock returned while the replica was paused: %v", err)
	default:
	}
	replica.Resume()
	require.NoError(t, <-got, "granted once the replica acknowledges")
}

// cmdCounter is a go-redis hook that counts the commands and pipelines
// it sees.
type cmdCounter struct{ n atomic.Int64 }

func (c *cmdCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (c *cmdCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *cmdCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// TestViewRunsNoHooks pins what redis/doc.go says of hooks: on a client
// with ContextTimeoutEnabled the Mutex's commands pass through the
// client's hooks (an instrumentation hook sees them); on a client with
// go-redis' defaults they run on a WithTimeout view, on which go-redis
// runs none of the client's hooks.
func TestViewRunsNoHooks(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s := redistest.Start(t)
	for _, tc := range []struct {
		name  string
		c     *goredis.Client
		hooks bool
	}{
		{"ContextTimeoutEnabled", s.Client(t).(*goredis.Client), true},
		{"defaults", s.DefaultClient(t).(*goredis.Client), false},
	} {
		var n cmdCounter
		tc.c.AddHook(&n)
		m := newMutex(t, tc.c, "hooks")
		h, err := m.TryLock(ctx)
		require.NoError(t, err, tc.name)
		require.NoError(t, h.Unlock(ctx), tc.name)
		if tc.hooks {
			assert.Positive(t, n.n.Load(), "%s: the hook sees the lock's commands", tc.name)
		} else {
			assert.Zero(t, n.n.Load(), "%s: the view runs no hook", tc.name)
		}
	}
}
