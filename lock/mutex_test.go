package lock_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/lock"
)

func TestLockUnlock(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	m := newMutex(t, etcdtest.Session(t, cli), "orders")
	ctx := etcdtest.Context(t)

	h, err := m.Lock(ctx)
	require.NoError(t, err)
	assert.Equal(t, "orders", h.Token().Name)
	assert.NotZero(t, h.Token().Seq)
	assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, m.Prefix()))

	_, err = m.TryLock(ctx)
	require.ErrorIs(t, err, lock.ErrLocked)
	assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, m.Prefix()), "a failed TryLock creates no key")

	require.NoError(t, h.Unlock(ctx))
	require.NoError(t, h.Unlock(ctx), "a second Unlock is a no-op")
	assert.ErrorIs(t, h.Err(), lock.ErrUnlocked)
	select {
	case <-h.Done():
	default:
		t.Fatal("Done must be closed after Unlock")
	}
	assert.Equal(t, int64(0), etcdtest.KeyCount(t, cli, m.Prefix()))

	h2, err := m.TryLock(ctx)
	require.NoError(t, err)
	assert.Greater(t, h2.Token().Seq, h.Token().Seq, "tokens strictly increase")
	require.NoError(t, h2.Unlock(ctx))
}

// Unlock of a watched grant reports ErrUnlocked, not a loss: the watcher
// sees Unlock's own delete and must leave the verdict to Unlock.
func TestUnlockWatched(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	m := newMutex(t, etcdtest.Session(t, c.Client(t)), "watched")
	ctx := etcdtest.Context(t)
	for range 20 {
		h, err := m.Lock(ctx)
		require.NoError(t, err)
		h.Done()
		require.NoError(t, h.Unlock(ctx))
		<-h.Done()
		require.ErrorIs(t, h.Err(), lock.ErrUnlocked)
		require.NotErrorIs(t, h.Err(), lock.ErrLockLost)
	}
}

// Two Mutexes on one session are independent locks of the same name: the
// second waits for the first (etcd issue #11360 is the counter-example).
func TestSameSessionExcludes(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	s := etcdtest.Session(t, c.Client(t))
	m1, m2 := newMutex(t, s, "x"), newMutex(t, s, "x")
	ctx := etcdtest.Context(t)
	h, err := m1.Lock(ctx)
	require.NoError(t, err)
	_, err = m2.TryLock(ctx)
	require.ErrorIs(t, err, lock.ErrLocked)
	got := make(chan lock.Held)
	go func() {
		h2, err := m2.Lock(ctx)
		assert.NoError(t, err)
		got <- h2
	}()
	require.NoError(t, h.Unlock(ctx))
	h2 := <-got
	require.NotNil(t, h2)
	require.NoError(t, h2.Unlock(ctx))
}

// Contention: 32 goroutines on separate sessions; every critical-section
// write goes through a MemoryGuard; no two holders overlap; tokens strictly
// increase in grant order.
func TestContention(t *testing.T) {
	t.Parallel()
	const workers, rounds = 32, 3
	c := etcdtest.New(t)
	cli := c.Client(t)
	guard := fence.NewMemoryGuard()
	var (
		inside  atomic.Int32
		overlap atomic.Int32
		mu      sync.Mutex
		grants  []uint64
		stale   atomic.Int32
	)
	ctx := etcdtest.Context(t)
	var wg sync.WaitGroup
	for range workers {
		m := newMutex(t, etcdtest.Session(t, cli), "contended")
		wg.Go(func() {
			for range rounds {
				h, err := m.Lock(ctx)
				if !assert.NoError(t, err) {
					return
				}
				if inside.Add(1) != 1 {
					overlap.Add(1)
				}
				mu.Lock()
				grants = append(grants, h.Token().Seq)
				mu.Unlock()
				if err := guard.Admit(ctx, h.Token()); err != nil {
					stale.Add(1)
				}
				inside.Add(-1)
				assert.NoError(t, h.Unlock(ctx))
			}
		})
	}
	wg.Wait()
	assert.Zero(t, overlap.Load(), "holders overlapped")
	assert.Zero(t, stale.Load(), "the guard rejected a holder's token")
	require.Len(t, grants, workers*rounds)
	for i := 1; i < len(grants); i++ {
		assert.Greater(t, grants[i], grants[i-1], "grant %d: tokens must strictly increase", i)
	}
}

// FIFO: waiters that arrive one after another are granted in that order.
func TestFIFO(t *testing.T) {
	t.Parallel()
	const waiters = 32
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	holder := newMutex(t, etcdtest.Session(t, cli), "fifo")
	h, err := holder.Lock(ctx)
	require.NoError(t, err)

	w := cli.Watch(ctx, holder.Prefix(), clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithRev(int64(h.Token().Seq)+1))
	order := make(chan int, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		m := newMutex(t, etcdtest.Session(t, cli), "fifo")
		wg.Go(func() {
			g, err := m.Lock(ctx)
			if !assert.NoError(t, err) {
				return
			}
			order <- i
			assert.NoError(t, g.Unlock(ctx))
		})
		etcdtest.WaitPuts(t, w, 1) // waiter i is queued before waiter i+1 starts
	}
	require.NoError(t, h.Unlock(ctx))
	wg.Wait()
	close(order)
	var got []int
	for i := range order {
		got = append(got, i)
	}
	want := make([]int, waiters)
	for i := range want {
		want[i] = i
	}
	assert.Equal(t, want, got)
}

// Names may nest ("a", "a/b"): each is its own lock. With the name put in
// the key unescaped, the queue of "a" would range over the keys of "a/b",
// and "a" would look held while only "a/b" is.
func TestNestedNamesAreIndependent(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	s := etcdtest.Session(t, cli)
	ctx := etcdtest.Context(t)
	names := []string{"a/b", "a", "a/b/c", "a.b"}
	var held []lock.Held
	for _, name := range names {
		h, err := newMutex(t, s, name).TryLock(ctx)
		require.NoError(t, err, "%q must be free while %v are held", name, names[:len(held)])
		held = append(held, h)
	}
	for i, name := range names {
		m := newMutex(t, s, name)
		assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, m.Prefix()), "%q's queue holds only its own key", name)
		require.NoError(t, held[i].Unlock(ctx))
	}
}

// TestLockKeyDeletedWhileWaiting: a waiter whose key is deleted behind its
// back (etcd #19597) is not granted when its predecessor leaves: Lock
// fails with ErrKeyDeleted, which does not match ErrLockLost (it never
// held the lock), and nothing of it is left.
func TestLockKeyDeletedWhileWaiting(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	holder := newMutex(t, etcdtest.Session(t, cli), "gone")
	h, err := holder.Lock(ctx)
	require.NoError(t, err)
	waiter := newMutex(t, etcdtest.Session(t, cli), "gone")

	w := etcdtest.WatchPuts(t, cli, waiter.Prefix())
	got := make(chan error, 1)
	go func() {
		wh, err := waiter.Lock(ctx)
		if wh != nil {
			_ = wh.Unlock(ctx)
		}
		got <- err
	}()
	wr := <-w
	require.NoError(t, wr.Err())
	require.Len(t, wr.Events, 1, "the waiter's enqueue")
	_, err = cli.Delete(ctx, string(wr.Events[0].Kv.Key))
	require.NoError(t, err)
	require.NoError(t, h.Unlock(ctx))

	select {
	case err = <-got:
	case <-ctx.Done():
		t.Fatal("the waiter's Lock did not return")
	}
	require.ErrorIs(t, err, lock.ErrKeyDeleted)
	assert.NotErrorIs(t, err, lock.ErrLockLost, "a waiter never held the lock")
	assert.Zero(t, etcdtest.KeyCount(t, cli, waiter.Prefix()), "no key left")
}
