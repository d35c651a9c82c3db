package lock_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

func newSemaphore(t *testing.T, s session.Source, name string, permits int) *lock.Semaphore {
	t.Helper()
	sem, err := lock.NewSemaphore(s, name, permits)
	require.NoError(t, err)
	return sem
}

// 12 contenders on separate sessions, 3 permits: never more than 3 inside,
// and 3 reached, under contention.
func TestSemaphoreContention(t *testing.T) {
	t.Parallel()
	const contenders, permits, rounds = 12, 3, 3
	cli := etcdtest.New(t).Client(t)
	ctx := etcdtest.Context(t)
	var inside, most atomic.Int32
	start := make(chan struct{})
	// The first holders wait until all permits are taken, so that "3
	// reached" does not depend on timing.
	full := make(chan struct{})
	var fullOnce sync.Once
	var wg sync.WaitGroup
	for range contenders {
		sem := newSemaphore(t, etcdtest.Session(t, cli), "pool", permits)
		wg.Go(func() {
			<-start
			for range rounds {
				h, err := sem.Acquire(ctx)
				if !assert.NoError(t, err) {
					return
				}
				in := inside.Add(1)
				for m := most.Load(); in > m && !most.CompareAndSwap(m, in); m = most.Load() {
				}
				if in == permits {
					fullOnce.Do(func() { close(full) })
				}
				select {
				case <-full:
				case <-ctx.Done():
				}
				inside.Add(-1)
				assert.NoError(t, h.Unlock(ctx))
			}
		})
	}
	close(start)
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int32(permits), "more holders than permits")
	assert.Equal(t, int32(permits), most.Load(), "all permits in use at once")
}

// FIFO, herd-free: 3 holders; 9 waiters queue one after another, each on
// its own session; each release grants the next waiter in arrival order,
// and only that waiter issues requests. A holder's session loss frees its
// permit too. Nothing is left behind.
func TestSemaphoreFIFOAndHerd(t *testing.T) {
	t.Parallel()
	const permits, waiters = 3, 9
	c := etcdtest.New(t)
	rc := newRequestCounter()
	cfg := c.Config()
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(rc.intercept)}
	cli := etcdtest.NewClient(t, cfg)
	ctx := etcdtest.Context(t)

	var holders []lock.Held
	var holderSessions []*session.Session
	for range permits {
		s := etcdtest.Session(t, cli)
		h, err := newSemaphore(t, s, "fifo", permits).TryAcquire(ctx)
		require.NoError(t, err)
		holders, holderSessions = append(holders, h), append(holderSessions, s)
	}
	sem := newSemaphore(t, etcdtest.Session(t, cli), "fifo", permits)
	_, err := sem.TryAcquire(ctx)
	require.ErrorIs(t, err, lock.ErrLocked, "every permit is taken")
	assert.Equal(t, int64(permits), etcdtest.KeyCount(t, cli, lock.SemaphorePrefix(sem)), "a refused TryAcquire leaves no key")

	w := etcdtest.WatchPuts(t, cli, lock.SemaphorePrefix(sem))
	granted := make(chan int)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := range waiters {
		wctx := context.WithValue(ctx, waiterID{}, i)
		m := newSemaphore(t, etcdtest.Session(t, cli), "fifo", permits)
		wg.Go(func() {
			h, err := m.Acquire(wctx)
			if !assert.NoError(t, err) {
				return
			}
			granted <- i
			<-release
			assert.NoError(t, h.Unlock(wctx))
		})
		etcdtest.WaitPuts(t, w, 1) // waiter i is queued before waiter i+1 starts
	}
	before := rc.snapshot()
	for i := range waiters {
		assert.Equal(t, 1, before[i], "waiter %d: one request to enqueue", i)
	}

	var order []int
	atGrant := map[int]int{}
	check := func(id int) {
		now := rc.snapshot()
		// One read confirms the grant; a second, linearizable one only if
		// that read ran behind the deletion.
		assert.Contains(t, []int{2, 3}, now[id], "waiter %d's requests when granted", id)
		atGrant[id] = now[id]
		// The waiters still queued issued no request since they enqueued:
		// the release woke only the waiter it granted.
		for j := range waiters {
			if _, ok := atGrant[j]; !ok {
				assert.Equal(t, 1, now[j], "after granting %d: queued waiter %d's requests", id, j)
			}
		}
	}
	// Free the three permits one by one, the third by ending its holder's
	// session.
	frees := []func() error{
		func() error { return holders[0].Unlock(ctx) },
		func() error { return holders[1].Unlock(ctx) },
		func() error { return holderSessions[2].Close(ctx) },
	}
	for _, free := range frees {
		require.NoError(t, free())
		id := <-granted
		order = append(order, id)
		check(id)
	}
	for range waiters - permits {
		release <- struct{}{} // one holder releases: the next waiter is granted
		id := <-granted
		order = append(order, id)
		check(id)
	}
	for range permits {
		release <- struct{}{}
	}
	wg.Wait()
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8}, order, "FIFO")
	assert.Zero(t, etcdtest.KeyCount(t, cli, lock.SemaphorePrefix(sem)))
}

// A cancelled or failed Acquire leaves no key; clients that disagree on
// the permits get ErrPermitsMismatch, as does a semaphore on a Mutex's
// name; bad input is refused.
func TestSemaphoreCancelMismatchBadInput(t *testing.T) {
	t.Parallel()
	cli := etcdtest.New(t).Client(t)
	ctx := etcdtest.Context(t)
	s := etcdtest.Session(t, cli)
	sem := newSemaphore(t, s, "one", 1)
	h, err := sem.Acquire(ctx)
	require.NoError(t, err)

	w := etcdtest.WatchPuts(t, cli, lock.SemaphorePrefix(sem))
	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { _, err := newSemaphore(t, etcdtest.Session(t, cli), "one", 1).Acquire(wctx); errc <- err }()
	etcdtest.WaitPuts(t, w, 1)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, lock.SemaphorePrefix(sem)), "the cancelled Acquire left its key")

	for _, other := range []*lock.Semaphore{newSemaphore(t, s, "one", 2)} {
		_, err := other.Acquire(ctx)
		assert.ErrorIs(t, err, lock.ErrPermitsMismatch)
		assert.ErrorContains(t, err, "this semaphore has 2 permits, its holders 1")
		_, err = other.TryAcquire(ctx)
		assert.ErrorIs(t, err, lock.ErrPermitsMismatch)
	}
	assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, lock.SemaphorePrefix(sem)), "a refused Acquire left its key")
	require.NoError(t, h.Unlock(ctx))

	m, err := newMutex(t, s, "mutex").Lock(ctx)
	require.NoError(t, err)
	_, err = newSemaphore(t, s, "mutex", 3).Acquire(ctx)
	assert.ErrorIs(t, err, lock.ErrPermitsMismatch)
	assert.ErrorContains(t, err, "not a semaphore")
	require.NoError(t, m.Unlock(ctx))

	for _, n := range []int{0, -1} {
		_, err := lock.NewSemaphore(s, "x", n)
		assert.ErrorIs(t, err, lock.ErrInvalidOption)
		assert.ErrorContains(t, err, "permits")
	}
	_, err = lock.NewSemaphore(s, "bad//name", 1)
	assert.ErrorIs(t, err, lock.ErrInvalidName)
	_, err = lock.NewSemaphore(nil, "x", 1)
	assert.ErrorIs(t, err, lock.ErrInvalidOption)
	resp, err := cli.Get(ctx, lock.SemaphorePrefix(sem), clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	assert.Zero(t, resp.Count)
}

// The layout inspection tools read: a permit's key is under Prefix and
// stores "permits=N owner"; a reader's key is under ReaderPrefix, a
// writer's and a Mutex's under Prefix but not ReaderPrefix, storing the
// owner alone.
func TestInspectionLayout(t *testing.T) {
	t.Parallel()
	cli := etcdtest.New(t).Client(t)
	ctx := etcdtest.Context(t)
	s := etcdtest.Session(t, cli)
	value := func(key string) []byte {
		t.Helper()
		resp, err := cli.Get(ctx, key)
		require.NoError(t, err)
		require.Len(t, resp.Kvs, 1, key)
		return resp.Kvs[0].Value
	}

	sem, err := lock.NewSemaphore(s, "pool", 3, lock.WithOwner("worker-7"))
	require.NoError(t, err)
	h, err := sem.Acquire(ctx)
	require.NoError(t, err)
	key := h.(*lock.Grant).Key()
	assert.True(t, strings.HasPrefix(key, lock.SemaphorePrefix(sem)), key)
	assert.Equal(t, "permits=3 worker-7", string(value(key)), "the layout dlock inspect reads")
	require.NoError(t, h.Unlock(ctx))

	rw, err := lock.NewRWMutex(s, "rw", lock.WithOwner("reader-1"))
	require.NoError(t, err)
	r, err := rw.RLock(ctx)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(r.(*lock.Grant).Key(), lock.RWPrefix(rw)+"r/"), "readers' keys are under the queue prefix + \"r/\"")
	assert.Equal(t, "reader-1", string(value(r.(*lock.Grant).Key())), "a reader's value is its owner alone")
	require.NoError(t, r.Unlock(ctx))
	w, err := rw.Lock(ctx)
	require.NoError(t, err)
	wkey := w.(*lock.Grant).Key()
	assert.True(t, strings.HasPrefix(wkey, lock.RWPrefix(rw)) && !strings.HasPrefix(wkey, (lock.RWPrefix(rw)+"r/")), wkey)
	require.NoError(t, w.Unlock(ctx))
	m, err := lock.New(s, "rw")
	require.NoError(t, err)
	assert.Equal(t, lock.RWPrefix(rw), m.Prefix(), "a Mutex of the name is one more writer")

}
