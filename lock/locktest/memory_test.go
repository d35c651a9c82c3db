package locktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/lock/locktest"
)

const waitFor = 10 * time.Second // bounds every wait of these tests

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	t.Cleanup(cancel)
	return ctx
}

// lockAsync starts l.Lock in a goroutine and returns where its result
// arrives; the goroutine ends when Lock returns (ctx bounds it).
func lockAsync(ctx context.Context, l lock.Locker) <-chan result {
	ch := make(chan result, 1)
	go func() {
		h, err := l.Lock(ctx)
		ch <- result{h, err}
	}()
	return ch
}

type result struct {
	h   lock.Held
	err error
}

// waitQueued waits until n Lock calls wait for name.
func waitQueued(t *testing.T, m *locktest.Memory, name string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return m.Waiting(name) == n }, waitFor, time.Millisecond, "waiting for %d queued Lock calls on %q", n, name)
}

func recv(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitFor):
		require.FailNow(t, "Lock did not return")
	}
	return result{}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Memory passes the conformance suite every backend passes: it is also
// the suite's reference, the Locker that checks the suite without a server
// (that the suite asks no more than every backend promises, FIFO for
// instance, is checked by the backends' own runs: package redis's Lockers
// are not FIFO).
func TestMemoryConformance(t *testing.T) {
	m := locktest.NewMemory()
	construct := func(name string) error {
		h, err := m.Locker(name).TryLock(t.Context())
		if err != nil {
			return err
		}
		return h.Unlock(t.Context())
	}
	locktest.Run(t, locktest.Backend{
		New: func(t *testing.T, name string) lock.Locker { return m.Locker(name) },
		Lose: func(t *testing.T, h lock.Held) {
			require.True(t, m.Lose(h.Token().Name), "Lose of a held lock")
		},
		Construct: construct,
		Bad:       map[string]func() error{"empty name": func() error { return construct("") }},
		Timeout:   waitFor,
	})
}

// Lose ends the current grant as a loss (Done, Err, Unlock), hands the
// lock to the first waiter with a higher token, and reports false when
// nobody holds the lock.
func TestMemoryLose(t *testing.T) {
	ctx := testCtx(t)
	m := locktest.NewMemory()
	assert.False(t, m.Lose("jobs"), "Lose of a name never locked")

	h1, err := m.Locker("jobs").Lock(ctx)
	require.NoError(t, err)
	tok, held := m.Holder("jobs")
	require.True(t, held)
	assert.Equal(t, h1.Token(), tok, "Holder is the grant's token")

	next := lockAsync(ctx, m.Locker("jobs"))
	waitQueued(t, m, "jobs", 1)

	require.True(t, m.Lose("jobs"), "Lose of a held lock")
	assert.True(t, isClosed(h1.Done()), "Done closed by Lose")
	assert.ErrorIs(t, h1.Err(), lock.ErrLockLost, "Err after Lose")
	assert.ErrorIs(t, h1.Unlock(ctx), lock.ErrLockLost, "Unlock after Lose")

	r := recv(t, next)
	require.NoError(t, r.err, "the waiter gets the lost lock")
	assert.Greater(t, r.h.Token().Seq, h1.Token().Seq, "the next grant's token is higher")
	tok, held = m.Holder("jobs")
	require.True(t, held)
	assert.Equal(t, r.h.Token(), tok, "Holder is the new grant")
	assert.ErrorIs(t, h1.Unlock(ctx), lock.ErrLockLost, "the lost grant's second Unlock")
	tok, held = m.Holder("jobs")
	assert.True(t, held && tok == r.h.Token(), "the lost grant's Unlock released the next holder")

	require.NoError(t, r.h.Unlock(ctx))
	assert.False(t, m.Lose("jobs"), "Lose of a released lock")
	_, held = m.Holder("jobs")
	assert.False(t, held, "Holder after Unlock")
	assert.ErrorIs(t, r.h.Err(), lock.ErrUnlocked)

	h3, err := m.Locker("jobs").TryLock(ctx)
	require.NoError(t, err)
	assert.Greater(t, h3.Token().Seq, r.h.Token().Seq, "tokens keep increasing")
	require.True(t, m.Lose("jobs"))
	h4, err := m.Locker("jobs").TryLock(ctx)
	require.NoError(t, err, "TryLock after a Lose with nobody waiting")
	assert.Greater(t, h4.Token().Seq, h3.Token().Seq, "tokens keep increasing after a Lose")
	assert.NoError(t, h4.Unlock(ctx))
}

// Waiters are granted in order of arrival, each with a higher token.
func TestMemoryFIFO(t *testing.T) {
	const waiters = 5
	ctx := testCtx(t)
	m := locktest.NewMemory()
	h, err := m.Locker("q").Lock(ctx)
	require.NoError(t, err)
	type granted struct {
		i int
		result
	}
	grants := make(chan granted, waiters)
	for i := range waiters {
		go func() {
			h, err := m.Locker("q").Lock(ctx)
			grants <- granted{i, result{h, err}}
		}()
		waitQueued(t, m, "q", i+1)
	}
	last := h.Token().Seq
	for i := range waiters {
		require.NoError(t, h.Unlock(ctx))
		var g granted
		select {
		case g = <-grants:
		case <-ctx.Done():
			require.FailNow(t, "no waiter was granted the lock")
		}
		require.NoError(t, g.err, "waiter %d", g.i)
		assert.Equal(t, i, g.i, "the waiter granted next (arrival order)")
		assert.Equal(t, last+1, g.h.Token().Seq, "waiter %d's token", g.i)
		last, h = g.h.Token().Seq, g.h
	}
	require.NoError(t, h.Unlock(ctx))
}

// A waiter whose ctx ends leaves the queue: the waiter behind it is
// granted next, and no grant is left to it.
func TestMemoryCancelWaiter(t *testing.T) {
	ctx := testCtx(t)
	m := locktest.NewMemory()
	h, err := m.Locker("c").Lock(ctx)
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first := lockAsync(cctx, m.Locker("c"))
	waitQueued(t, m, "c", 1)
	second := lockAsync(ctx, m.Locker("c"))
	waitQueued(t, m, "c", 2)

	cancel()
	r := recv(t, first)
	assert.ErrorIs(t, r.err, context.Canceled, "the cancelled waiter's error")
	assert.Nil(t, r.h)
	assert.Equal(t, 1, m.Waiting("c"), "the cancelled waiter left the queue")

	require.NoError(t, h.Unlock(ctx))
	r = recv(t, second)
	require.NoError(t, r.err, "the waiter behind the cancelled one")
	assert.Equal(t, h.Token().Seq+1, r.h.Token().Seq, "no grant went to the cancelled waiter")
	require.NoError(t, r.h.Unlock(ctx))
	_, held := m.Holder("c")
	assert.False(t, held)
}

// Memories are independent, and a bad name is refused at Lock.
func TestMemoryIndependentAndBadName(t *testing.T) {
	ctx := testCtx(t)
	a, b := locktest.NewMemory(), locktest.NewMemory()
	ha, err := a.Locker("x").TryLock(ctx)
	require.NoError(t, err)
	hb, err := b.Locker("x").TryLock(ctx)
	require.NoError(t, err, "another Memory's lock of the same name")
	assert.NoError(t, ha.Unlock(ctx))
	assert.NoError(t, hb.Unlock(ctx))

	_, err = a.Locker("a//b").Lock(ctx)
	assert.ErrorIs(t, err, lock.ErrInvalidName)
	_, err = a.Locker("").TryLock(ctx)
	assert.ErrorIs(t, err, lock.ErrInvalidName)
}
