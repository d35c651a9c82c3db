package lock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

type waiterID struct{}

// requestCounter counts unary etcd requests per waiter, identified by a
// context value. The reads a waiter makes as its watch starts, when writes
// came since its enqueue (a Mutex waiter's read of its predecessor's key, a
// semaphore waiter's count of the entries before it), are counted apart,
// in starts.
type requestCounter struct {
	mu     sync.Mutex
	n      map[int]int
	starts map[int]int
}

func newRequestCounter() *requestCounter {
	return &requestCounter{n: map[int]int{}, starts: map[int]int{}}
}

func (rc *requestCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if id, ok := ctx.Value(waiterID{}).(int); ok {
		rc.mu.Lock()
		if r, ok := req.(*pb.RangeRequest); ok && (len(r.RangeEnd) == 0 || r.Limit == 0 && r.MaxCreateRevision > 0) {
			rc.starts[id]++
		} else {
			rc.n[id]++
		}
		rc.mu.Unlock()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (rc *requestCounter) snapshot() map[int]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	m := make(map[int]int, len(rc.n))
	for k, v := range rc.n {
		m[k] = v
	}
	return m
}

// Herd: with 100 waiters queued, each release makes exactly one waiter
// issue etcd requests. Every waiter issues exactly one request to enqueue
// and one after its predecessor's deletion before it is granted (and at
// most one read of its predecessor's key as its watch starts); a
// thundering herd (every waiter re-reading on every release) would add
// requests to the waiters still queued.
func TestNoThunderingHerd(t *testing.T) {
	t.Parallel()
	const waiters = 100
	c := etcdtest.New(t)
	rc := newRequestCounter()
	cfg := c.Config()
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(rc.intercept)}
	cli := etcdtest.NewClient(t, cfg)
	s := etcdtest.Session(t, cli)
	ctx := etcdtest.Context(t)
	holder := newMutex(t, s, "herd")
	h, err := holder.Lock(ctx)
	require.NoError(t, err)

	w := cli.Watch(ctx, holder.Prefix(), clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithRev(int64(h.Token().Seq)+1))
	granted := make(chan int)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := range waiters {
		wctx := context.WithValue(ctx, waiterID{}, i)
		m := newMutex(t, s, "herd")
		wg.Go(func() {
			g, err := m.Lock(wctx)
			if !assert.NoError(t, err) {
				return
			}
			granted <- i
			<-release
			assert.NoError(t, g.Unlock(wctx))
		})
	}
	etcdtest.WaitPuts(t, w, waiters)
	before := rc.snapshot()
	for i := range waiters {
		assert.Equal(t, 1, before[i], "waiter %d: one request to enqueue", i)
	}
	require.NoError(t, h.Unlock(ctx))
	atGrant := map[int]int{} // requests of each granted waiter when granted
	fallbacks := 0
	for range waiters {
		id := <-granted
		now := rc.snapshot()
		// The granted waiter read the queue once after its predecessor's
		// deletion: serializably, and again linearizably only if that read
		// ran behind the deletion (etcd sends the watch event a moment
		// before the store's revision moves).
		if assert.Contains(t, []int{2, 3}, now[id], "waiter %d's requests when granted", id) && now[id] == 3 {
			fallbacks++
		}
		atGrant[id] = now[id]
		// Nobody else issued requests since everyone enqueued, but the
		// earlier holders' one Unlock each.
		for j := range waiters {
			want := 1
			if g, ok := atGrant[j]; ok && j != id {
				want = g + 1
			}
			if j != id {
				assert.Equal(t, want, now[j], "after granting %d: waiter %d's requests", id, j)
			}
		}
		release <- struct{}{}
	}
	wg.Wait()
	rc.mu.Lock()
	for i := range waiters {
		assert.LessOrEqual(t, rc.starts[i], 1, "waiter %d: at most one read as its watch starts", i)
	}
	rc.mu.Unlock()
	t.Logf("%d of %d grants read the queue a second time", fallbacks, waiters)
}

// A stale or retried Unlock never deletes the next holder's key.
func TestStaleUnlock(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	a := newMutex(t, etcdtest.Session(t, cli), "stale")
	b := newMutex(t, etcdtest.Session(t, cli), "stale")

	// Retried unlock: A unlocks, B is granted, A's Unlock is retried.
	ha, err := a.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, ha.Unlock(ctx))
	hb, err := b.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, ha.Unlock(ctx))
	assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, b.Prefix()), "B's key must survive A's retried Unlock")
	require.NoError(t, hb.Unlock(ctx))

	// Stale unlock: A's key is deleted behind its back, B is granted, A
	// unlocks late.
	ha, err = a.Lock(ctx)
	require.NoError(t, err)
	_, err = cli.Delete(ctx, ha.(*lock.Grant).Key())
	require.NoError(t, err)
	hb, err = b.Lock(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, ha.Unlock(ctx), lock.ErrLockLost)
	assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, b.Prefix()), "B's key must survive A's stale Unlock")
	_, err = b.TryLock(ctx)
	assert.ErrorIs(t, err, lock.ErrLocked, "B still holds the lock")
	require.NoError(t, hb.Unlock(ctx))
}

// A cancelled or failed acquire leaves no key behind.
func TestCancelLeavesNoKey(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	holder := newMutex(t, etcdtest.Session(t, cli), "cancel")
	h, err := holder.Lock(ctx)
	require.NoError(t, err)
	w := cli.Watch(ctx, holder.Prefix(), clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithRev(int64(h.Token().Seq)+1))

	// Cancel while waiting.
	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	m := newMutex(t, etcdtest.Session(t, cli), "cancel")
	go func() { _, err := m.Lock(wctx); errc <- err }()
	etcdtest.WaitPuts(t, w, 1)
	cancel()
	err = <-errc
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, holder.Prefix()), "only the holder's key remains")

	// Deadline while waiting.
	dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer dcancel()
	_, err = m.Lock(dctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, holder.Prefix()))

	// Failed acquire: the waiter's session ends while it waits.
	ws := etcdtest.Session(t, cli)
	wm := newMutex(t, ws, "cancel")
	go func() { _, err := wm.Lock(ctx); errc <- err }()
	etcdtest.WaitPuts(t, w, 2) // the deadline attempt and this one
	require.NoError(t, ws.Close(ctx))
	err = <-errc
	require.ErrorIs(t, err, lock.ErrSessionDone)
	assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, holder.Prefix()))

	require.NoError(t, h.Unlock(ctx))
	assert.Equal(t, int64(0), etcdtest.KeyCount(t, cli, holder.Prefix()))
}

// A waiter whose session ends while it waits gets an error, never the lock,
// even when the lock is released right after.
func TestWaiterSessionEnds(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	holder := newMutex(t, etcdtest.Session(t, cli), "w")
	h, err := holder.Lock(ctx)
	require.NoError(t, err)
	w := cli.Watch(ctx, holder.Prefix(), clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithRev(int64(h.Token().Seq)+1))

	ws := etcdtest.Session(t, cli)
	wm := newMutex(t, ws, "w")
	errc := make(chan error, 1)
	go func() {
		g, err := wm.Lock(ctx)
		if err == nil {
			g.Unlock(ctx)
		}
		errc <- err
	}()
	etcdtest.WaitPuts(t, w, 1)
	_, err = cli.Revoke(ctx, ws.Lease()) // the server ends the waiter's session
	require.NoError(t, err)
	require.NoError(t, h.Unlock(ctx))
	err = <-errc
	require.ErrorIs(t, err, lock.ErrSessionDone)
	// A waiter whose session ends never had the lock: it did not lose one.
	assert.NotErrorIs(t, err, lock.ErrLockLost)
	assert.ErrorIs(t, err, session.ErrLeaseGone, "the server revoked the lease")
	assert.Equal(t, int64(0), etcdtest.KeyCount(t, cli, holder.Prefix()))
}

// Closing a session releases every lock it holds at once; the waiters are
// granted.
func TestSessionCloseReleasesAll(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	s := etcdtest.Session(t, cli)
	names := []string{"a", "b", "c"}
	var helds []lock.Held
	for _, n := range names {
		h, err := newMutex(t, s, n).Lock(ctx)
		require.NoError(t, err)
		helds = append(helds, h)
	}
	other := etcdtest.Session(t, cli)
	got := make(chan lock.Held, len(names))
	for _, n := range names {
		m := newMutex(t, other, n)
		go func() {
			h, err := m.Lock(ctx)
			assert.NoError(t, err)
			got <- h
		}()
	}
	w := cli.Watch(ctx, lock.DefaultPrefix, clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithRev(int64(helds[len(helds)-1].Token().Seq)+1))
	etcdtest.WaitPuts(t, w, len(names))
	require.NoError(t, s.Close(ctx))
	for _, h := range helds {
		<-h.Done()
		assert.ErrorIs(t, h.Err(), lock.ErrLockLost)
		assert.ErrorIs(t, h.Err(), session.ErrClosed)
	}
	for range names {
		h := <-got
		require.NotNil(t, h)
		assert.NoError(t, h.Unlock(ctx))
	}
}

// A client cut off from etcd: its session's Done and every Held.Done close
// strictly before another client can observe the lease gone.
func TestPartitionedHolderStopsFirst(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	ctx := etcdtest.Context(t)
	pcli, proxy := c.ProxiedClient(t)
	ps := etcdtest.Session(t, pcli, session.WithTTL(2*time.Second))
	var helds []lock.Held
	for _, n := range []string{"p1", "p2"} {
		h, err := newMutex(t, ps, n).Lock(ctx)
		require.NoError(t, err)
		helds = append(helds, h)
		h.Done() // start watching
	}
	cli := c.Client(t)
	w := cli.Watch(ctx, lock.DefaultPrefix, clientv3.WithPrefix(), clientv3.WithFilterPut())
	var closedFirst atomic.Bool
	proxy.Blackhole()
	// The other client learns of the lease's end from the deletion of the
	// held keys, which the server performs when it expires the lease.
	wr := <-w
	require.NoError(t, wr.Err())
	select {
	case <-ps.Done():
		closedFirst.Store(true)
	default:
	}
	for _, h := range helds {
		select {
		case <-h.Done():
		default:
			t.Errorf("Held.Done of %s still open when the lease's keys were deleted", h.Token())
		}
	}
	assert.True(t, closedFirst.Load(), "session Done must close before the server expires the lease")
	assert.ErrorIs(t, ps.Err(), session.ErrExpired)
	proxy.Unblackhole()
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	s := etcdtest.Session(t, c.Client(t))
	for _, name := range []string{"", "a//b", "/a", "a/", "../x", "a/./b", "sp ace", "ünï", string(make([]byte, lock.MaxNameLen+1))} {
		_, err := lock.New(s, name)
		assert.ErrorIs(t, err, lock.ErrInvalidName, "name %q", name)
		assert.ErrorContains(t, err, "name", "name %q", name)
	}
	for _, name := range []string{"a", "orders/eu-1", "jobs/v2.nightly", "A_B"} {
		_, err := lock.New(s, name)
		assert.NoError(t, err, "name %q", name)
	}
	_, err := lock.New(nil, "x")
	assert.ErrorIs(t, err, lock.ErrInvalidOption)
	assert.ErrorContains(t, err, "session")
	_, err = lock.New(s, "x", lock.WithPrefix(""))
	assert.ErrorContains(t, err, "prefix")
	_, err = lock.New(s, "x", lock.WithPrefix("p/"))
	assert.ErrorContains(t, err, "prefix")
	_, err = lock.New(s, "x", lock.WithPrefix("p%2Fq"))
	assert.ErrorIs(t, err, lock.ErrInvalidOption)
	assert.ErrorContains(t, err, "'%'")
	_, err = lock.New(s, "x", nil)
	assert.ErrorIs(t, err, lock.ErrInvalidOption)
	assert.ErrorContains(t, err, "option 0 is nil")
	for _, owner := range []string{"has space", "tab\t", "ünï", strings.Repeat("o", 257)} {
		_, err = lock.New(s, "x", lock.WithOwner(owner))
		assert.ErrorIs(t, err, lock.ErrInvalidOption, "owner %q", owner)
		assert.ErrorContains(t, err, "owner", "owner %q", owner)
	}
	_, err = lock.New(s, "x", lock.WithOwner(lock.DefaultOwner()))
	assert.NoError(t, err, "the default owner is a valid owner")
}

// IsOwner makes an etcd write conditional on holding the lock.
func TestIsOwner(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	h, err := newMutex(t, etcdtest.Session(t, cli), "own").Lock(ctx)
	require.NoError(t, err)
	g := h.(*lock.Grant)
	resp, err := cli.Txn(ctx).If(g.IsOwner()).Then(clientv3.OpPut("data", "1")).Commit()
	require.NoError(t, err)
	assert.True(t, resp.Succeeded, "write under the lock commits")
	require.NoError(t, h.Unlock(ctx))
	resp, err = cli.Txn(ctx).If(g.IsOwner()).Then(clientv3.OpPut("data", "2")).Commit()
	require.NoError(t, err)
	assert.False(t, resp.Succeeded, "write after unlock is refused")
}

// Do cancels fn's context, with a cause matching ErrLockLost, when the
// lock is lost.
func TestDoCancelsOnLoss(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	m := newMutex(t, etcdtest.Session(t, cli, fastBeat), "do")
	err := lock.Do(ctx, m, func(fnCtx context.Context, h lock.Held) error {
		// Lose it, from outside fn's context (which the loss cancels,
		// possibly before this Delete's reply arrives).
		_, err := cli.Delete(ctx, h.(*lock.Grant).Key())
		require.NoError(t, err)
		<-fnCtx.Done()
		assert.ErrorIs(t, context.Cause(fnCtx), lock.ErrLockLost)
		return context.Cause(fnCtx)
	})
	assert.ErrorIs(t, err, lock.ErrLockLost)

	ran := false
	require.NoError(t, lock.Do(ctx, m, func(ctx context.Context, h lock.Held) error {
		ran = true
		return ctx.Err()
	}))
	assert.True(t, ran)
	assert.Equal(t, int64(0), etcdtest.KeyCount(t, cli, m.Prefix()))
}

// One heartbeat loop per session, not one per lock: while a session holds
// 50 locks, each extension of its deadline costs one keepalive (one
// message on the session's keepalive stream).
func TestOneHeartbeatForManyLocks(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	var keepalives atomic.Int64
	cfg := c.Config()
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainStreamInterceptor(
		func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil || method != "/etcdserverpb.Lease/LeaseKeepAlive" {
				return cs, err
			}
			return countSends{cs, &keepalives}, nil
		})}
	cli := etcdtest.NewClient(t, cfg)
	s := etcdtest.Session(t, cli, session.WithTTL(2*time.Second), session.WithHeartbeat(100*time.Millisecond))
	ctx := etcdtest.Context(t)
	for i := range 50 {
		h, err := newMutex(t, s, fmt.Sprintf("many/%d", i)).Lock(ctx)
		require.NoError(t, err)
		h.Done()
		defer h.Unlock(ctx)
	}
	const extensions = 5
	start := keepalives.Load()
	last := s.Deadline()
	for n := 0; n < extensions; {
		select {
		case <-ctx.Done():
			t.Fatal("the deadline stopped moving")
		case <-s.Done():
			t.Fatalf("session ended: %v", s.Err())
		case <-time.After(10 * time.Millisecond): // polling the deadline: no event exists for it
		}
		if d := s.Deadline(); d.After(last) {
			last = d
			n++
		}
	}
	got := keepalives.Load() - start
	assert.LessOrEqual(t, got, int64(extensions+1), "keepalives for %d extensions with 50 locks held", extensions)
	assert.GreaterOrEqual(t, got, int64(extensions-1)) // one may have been in flight at the start
}

// countSends counts the messages sent on a stream.
type countSends struct {
	grpc.ClientStream
	n *atomic.Int64
}

func (c countSends) SendMsg(m any) error {
	c.n.Add(1)
	return c.ClientStream.SendMsg(m)
}

// A Mutex on a session.Manager outlives its session: the grant of the
// ended session reports the loss, and the same Mutex's next Lock runs on a
// fresh session. On a plain Session, the next Lock fails (today's meaning).
func TestMutexOnManager(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	m, err := session.NewManager(cli, fastBeat)
	require.NoError(t, err)
	defer m.Close(ctx)
	mu, err := lock.New(m, "managed")
	require.NoError(t, err)
	h, err := mu.Lock(ctx)
	require.NoError(t, err)
	s, err := m.Current(ctx)
	require.NoError(t, err)
	_, err = cli.Revoke(ctx, s.Lease())
	require.NoError(t, err)
	<-h.Done()
	assert.ErrorIs(t, h.Err(), lock.ErrLockLost)
	assert.ErrorIs(t, h.Unlock(ctx), lock.ErrLockLost)
	<-s.Done()
	h2, err := mu.Lock(ctx)
	require.NoError(t, err, "the next Lock runs on a fresh session")
	assert.Greater(t, h2.Token().Seq, h.Token().Seq)
	require.NoError(t, h2.Unlock(ctx))

	plain := etcdtest.Session(t, cli)
	pm := newMutex(t, plain, "plain")
	require.NoError(t, plain.Close(ctx))
	_, err = pm.Lock(ctx)
	assert.ErrorIs(t, err, lock.ErrSessionDone)
	assert.ErrorIs(t, err, session.ErrClosed)
}

// A panic in Do's fn releases the lock before it goes on: another
// session's TryLock is granted, no key is left, and the grant's Done is
// closed. (A recovered panic used to leave the key until the session
// ended: never, on a renewing Client.)
func TestDoReleasesOnPanic(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	m := newMutex(t, etcdtest.Session(t, cli), "panic")
	var held lock.Held
	func() {
		defer func() {
			assert.Equal(t, "boom", recover(), "the panic reaches Do's caller")
		}()
		_ = lock.Do(ctx, m, func(ctx context.Context, h lock.Held) error {
			held = h
			panic("boom")
		})
	}()
	require.NotNil(t, held)
	select {
	case <-held.Done():
	default:
		t.Error("the grant's Done is open after the panic")
	}
	assert.ErrorIs(t, held.Err(), lock.ErrUnlocked)
	assert.Equal(t, int64(0), etcdtest.KeyCount(t, cli, m.Prefix()), "no key left")
	h2, err := newMutex(t, etcdtest.Session(t, cli), "panic").TryLock(ctx)
	require.NoError(t, err, "another session gets the lock")
	require.NoError(t, h2.Unlock(ctx))
}
