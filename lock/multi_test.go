package lock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/lock/locktest"
)

// pairLoop has two goroutines take the locks a and b together, rounds
// times each, one passing (a, b) and the other (b, a), each through its
// own Lockers (newPair returns them). A deadlock shows as LockAll failing
// at the ctx's deadline. It also checks exclusion on each lock and that
// the grants come back in argument order.
func pairLoop(t *testing.T, ctx context.Context, rounds int, newPair func() (a, b lock.Locker)) {
	t.Helper()
	var inside [2]atomic.Int32
	var overlaps, done atomic.Int32
	var wg sync.WaitGroup
	for g := range 2 {
		a, b := newPair()
		ls, idx := []lock.Locker{a, b}, [2]int{0, 1}
		if g == 1 {
			ls, idx = []lock.Locker{b, a}, [2]int{1, 0}
		}
		want := []string{"pair/a", "pair/b"}
		wg.Go(func() {
			for range rounds {
				hs, err := lock.LockAll(ctx, ls...)
				if !assert.NoError(t, err, "LockAll of goroutine %d (a deadlock ends at the test's deadline)", g) {
					return
				}
				for i, h := range hs {
					assert.Equal(t, want[idx[i]], h.Token().Name, "grants in argument order")
					if inside[idx[i]].Add(1) != 1 {
						overlaps.Add(1)
					}
				}
				for i, h := range hs {
					inside[idx[i]].Add(-1)
					assert.NoError(t, h.Unlock(ctx))
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Zero(t, overlaps.Load(), "two holders of one lock at once")
	assert.EqualValues(t, 2*rounds, done.Load(), "rounds done")
}

// Two goroutines taking {a, b} and {b, a} in a loop never deadlock:
// LockAll takes the locks in one global order, whatever the argument
// order.
func TestLockAllNoDeadlock(t *testing.T) {
	t.Parallel()
	t.Run("Memory", func(t *testing.T) {
		mem := locktest.NewMemory()
		ctx := etcdtest.ContextFor(t, 20*time.Second)
		pairLoop(t, ctx, 2000, func() (lock.Locker, lock.Locker) {
			return mem.Locker("pair/a"), mem.Locker("pair/b")
		})
	})
	t.Run("etcd", func(t *testing.T) {
		cli := etcdtest.New(t).Client(t)
		ctx := etcdtest.ContextFor(t, 30*time.Second)
		pairLoop(t, ctx, 50, func() (lock.Locker, lock.Locker) {
			s := etcdtest.Session(t, cli)
			return newMutex(t, s, "pair/a"), newMutex(t, s, "pair/b")
		})
		assert.Zero(t, etcdtest.KeyCount(t, cli, lock.DefaultPrefix+"/"), "keys left")
	})
}

// A LockAll cancelled (or past its deadline) while it waits for its second
// lock releases the first: no key of its own is left, and its error names
// the lock it waited for and matches the ctx's error.
func TestLockAllCancelLeavesNoKey(t *testing.T) {
	t.Parallel()
	cli := etcdtest.New(t).Client(t)
	ctx := etcdtest.Context(t)
	s := etcdtest.Session(t, cli)
	a, b := newMutex(t, s, "cancel/a"), newMutex(t, s, "cancel/b")
	hb, err := newMutex(t, etcdtest.Session(t, cli), "cancel/b").Lock(ctx)
	require.NoError(t, err)

	for _, tc := range []struct {
		name string
		want error
	}{
		{"Cancel", context.Canceled},
		{"Deadline", context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := etcdtest.WatchPuts(t, cli, b.Prefix())
			var lctx context.Context
			var cancel context.CancelFunc
			if tc.want == context.Canceled {
				lctx, cancel = context.WithCancel(ctx)
			} else {
				lctx, cancel = context.WithTimeout(ctx, 2*time.Second)
			}
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				hs, err := lock.LockAll(lctx, b, a) // a is taken first: its key sorts first
				assert.Nil(t, hs)
				errc <- err
			}()
			etcdtest.WaitPuts(t, w, 1) // LockAll waits for b: it holds a
			if tc.want == context.Canceled {
				assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, a.Prefix()), "LockAll holds a while it waits for b")
				cancel()
			}
			err := <-errc
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), "ls[0] (etcd:"+b.Prefix()+")", "the error names the lock waited for")
			assert.Equal(t, int64(0), etcdtest.KeyCount(t, cli, a.Prefix()), "a's key left behind")
			assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, b.Prefix()), "only the holder's key of b")
			ha, err := newMutex(t, etcdtest.Session(t, cli), "cancel/a").TryLock(ctx)
			require.NoError(t, err, "a is free")
			require.NoError(t, ha.Unlock(ctx))
		})
	}
	require.NoError(t, hb.Unlock(ctx))
}

// A panic in DoAll's fn releases every lock before it goes on.
func TestDoAllReleasesOnPanic(t *testing.T) {
	t.Parallel()
	cli := etcdtest.New(t).Client(t)
	ctx := etcdtest.Context(t)
	s := etcdtest.Session(t, cli)
	names := []string{"panic/a", "panic/b"}
	ls := []lock.Locker{newMutex(t, s, names[0]), newMutex(t, s, names[1])}
	var held []lock.Held
	func() {
		defer func() {
			assert.Equal(t, "boom", recover(), "the panic reaches DoAll's caller")
		}()
		_ = lock.DoAll(ctx, ls, func(ctx context.Context, hs []lock.Held) error {
			held = hs
			panic("boom")
		})
	}()
	require.Len(t, held, 2)
	other := etcdtest.Session(t, cli)
	for i, h := range held {
		select {
		case <-h.Done():
		default:
			t.Errorf("grant %d: Done open after the panic", i)
		}
		assert.ErrorIs(t, h.Err(), lock.ErrUnlocked, "grant %d", i)
		m := ls[i].(*lock.Mutex)
		assert.Equal(t, int64(0), etcdtest.KeyCount(t, cli, m.Prefix()), "key of %s left", names[i])
		h2, err := newMutex(t, other, names[i]).TryLock(ctx)
		require.NoError(t, err, "another session gets %s", names[i])
		require.NoError(t, h2.Unlock(ctx))
	}
}

// Losing one of DoAll's grants (its key deleted by hand, or Memory.Lose)
// cancels fn's context with the loss as the cause; DoAll reports the loss
// and releases the other lock.
func TestDoAllCancelsOnLoss(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, ctx context.Context, ls []lock.Locker, lose func(h lock.Held)) {
		t.Helper()
		err := lock.DoAll(ctx, ls, func(fnCtx context.Context, hs []lock.Held) error {
			lose(hs[1])
			select {
			case <-fnCtx.Done():
			case <-ctx.Done():
				t.Error("fn's context was not cancelled by the loss")
			}
			assert.ErrorIs(t, context.Cause(fnCtx), lock.ErrLockLost, "fn's context's cause")
			assert.False(t, isClosed(hs[0].Done()), "the other grant is still held while fn runs")
			return context.Cause(fnCtx)
		})
		assert.ErrorIs(t, err, lock.ErrLockLost, "DoAll's error")
	}
	t.Run("etcd", func(t *testing.T) {
		cli := etcdtest.New(t).Client(t)
		ctx := etcdtest.ContextFor(t, 20*time.Second)
		s := etcdtest.Session(t, cli, fastBeat)
		a, b := newMutex(t, s, "loss/a"), newMutex(t, s, "loss/b")
		check(t, ctx, []lock.Locker{a, b}, func(h lock.Held) {
			_, err := cli.Delete(ctx, h.(*lock.Grant).Key())
			require.NoError(t, err)
		})
		assert.Equal(t, int64(0), etcdtest.KeyCount(t, cli, a.Prefix()), "a's key left")
		assert.Equal(t, int64(0), etcdtest.KeyCount(t, cli, b.Prefix()), "b's key left")
	})
	t.Run("Memory", func(t *testing.T) {
		ctx := etcdtest.ContextFor(t, 10*time.Second)
		mem := locktest.NewMemory()
		check(t, ctx, []lock.Locker{mem.Locker("loss/a"), mem.Locker("loss/b")}, func(h lock.Held) {
			require.True(t, mem.Lose(h.Token().Name))
		})
		for _, n := range []string{"loss/a", "loss/b"} {
			_, held := mem.Holder(n)
			assert.False(t, held, "%s still held", n)
		}
	})
}

// A grant lost while LockAll waits for a later lock ends the wait at once:
// LockAll returns the loss, naming both locks, and leaves nothing (the
// waiter leaves the queue).
func TestLockAllLossWhileWaiting(t *testing.T) {
	t.Parallel()
	ctx := etcdtest.ContextFor(t, 10*time.Second)
	mem := locktest.NewMemory()
	hb, err := mem.Locker("b").Lock(ctx)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		_, err := lock.LockAll(ctx, mem.Locker("a"), mem.Locker("b"))
		errc <- err
	}()
	require.Eventually(t, func() bool { return mem.Waiting("b") == 1 }, 10*time.Second, time.Millisecond, "LockAll never queued for b")
	require.True(t, mem.Lose("a"))
	err = <-errc // b is still held: only the loss can end LockAll before ctx does
	assert.ErrorIs(t, err, lock.ErrLockLost)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "LockAll kept waiting for b after a was lost")
	assert.NotErrorIs(t, err, context.Canceled, "a loss, not a cancel")
	assert.ErrorContains(t, err, "ls[0] (")
	assert.ErrorContains(t, err, "lost while acquiring ls[1]")
	assert.Zero(t, mem.Waiting("b"), "LockAll's waiter left b's queue")
	_, held := mem.Holder("a")
	assert.False(t, held, "a is free")
	tok, held := mem.Holder("b")
	assert.True(t, held && tok == hb.Token(), "b is still its first holder's")
	require.NoError(t, hb.Unlock(ctx))
}

// An acquire that fails (here: a bad name) makes LockAll release what it
// took, and its error says which lock failed and why.
func TestLockAllFailureReleases(t *testing.T) {
	t.Parallel()
	ctx := etcdtest.ContextFor(t, 10*time.Second)
	mem := locktest.NewMemory()
	hs, err := lock.LockAll(ctx, mem.Locker("z//bad"), mem.Locker("a"))
	require.Error(t, err)
	assert.Nil(t, hs)
	assert.ErrorIs(t, err, lock.ErrInvalidName)
	assert.ErrorContains(t, err, "ls[0] (")
	_, held := mem.Holder("a")
	assert.False(t, held, "a, taken first, was released")
	h, err := mem.Locker("a").TryLock(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), h.Token().Seq, "a was granted once before")
	require.NoError(t, h.Unlock(ctx))
}

// noKey is a Locker wrapper that does not pass its inner Locker's LockKey
// on.
type noKey struct{ lock.Locker }

// wrapped is a Locker wrapper of a Mutex that passes its LockKey on (by
// embedding it).
type wrapped struct{ *lock.Mutex }

// LockAll refuses, before any acquire, a nil Locker, one without LockKey,
// and two Lockers of one lock (in one backend: two Mutexes, or a Mutex and
// an RWMutex, of one name); no Locker means nothing to do.
func TestLockAllRefuses(t *testing.T) {
	t.Parallel()
	cli := etcdtest.New(t).Client(t)
	ctx := etcdtest.ContextFor(t, 10*time.Second) // a self-deadlock ends here
	s1, s2 := etcdtest.Session(t, cli), etcdtest.Session(t, cli)
	a := newMutex(t, s1, "refuse/a")
	rw, err := lock.NewRWMutex(s2, "refuse/a")
	require.NoError(t, err)
	other := newMutex(t, s1, "other")
	mem := locktest.NewMemory()

	for _, tc := range []struct {
		name string
		ls   []lock.Locker
		want string
		is   error
	}{
		{"nil", []lock.Locker{a, nil}, "ls[1] is nil", nil},
		{"no LockKey", []lock.Locker{noKey{mem.Locker("x")}, a}, "ls[0] (lock_test.noKey) has no LockKey method", errors.ErrUnsupported},
		{"same Mutex twice", []lock.Locker{a, other, newMutex(t, s2, "refuse/a")}, "ls[0] and ls[2] are the same lock (etcd:dlock/lock/refuse%2Fa/)", nil},
		{"Mutex and RWMutex", []lock.Locker{rw, a}, "ls[0] and ls[1] are the same lock", nil},
		{"a Mutex and its wrapper", []lock.Locker{a, wrapped{a}}, "ls[0] and ls[1] are the same lock (etcd:dlock/lock/refuse%2Fa/)", nil},
		{"same Memory lock twice", []lock.Locker{mem.Locker("x"), mem.Locker("x")}, "are the same lock", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs, err := lock.LockAll(ctx, tc.ls...)
			require.Error(t, err)
			assert.Nil(t, hs)
			assert.ErrorContains(t, err, tc.want)
			if tc.is != nil {
				assert.ErrorIs(t, err, tc.is)
			}
			for _, p := range []string{a.Prefix(), other.Prefix()} {
				assert.Zero(t, etcdtest.KeyCount(t, cli, p), "a key was created under %s", p)
			}
			_, held := mem.Holder("x")
			assert.False(t, held, "a Memory lock was taken")
		})
	}

	hs, err := lock.LockAll(ctx)
	assert.NoError(t, err, "no Lockers")
	assert.Empty(t, hs)
	ran := false
	assert.NoError(t, lock.DoAll(ctx, nil, func(ctx context.Context, hs []lock.Held) error { ran = true; return nil }))
	assert.True(t, ran)
}

// LockAll mixes backends: an etcd Mutex and a Memory lock in one call,
// each grant with its own backend's token, in argument order.
func TestLockAllMixed(t *testing.T) {
	t.Parallel()
	cli := etcdtest.New(t).Client(t)
	ctx := etcdtest.Context(t)
	s := etcdtest.Session(t, cli)
	mem := locktest.NewMemory()
	m := newMutex(t, s, "mixed")
	err := lock.DoAll(ctx, []lock.Locker{mem.Locker("mixed"), m}, func(ctx context.Context, hs []lock.Held) error {
		tok, held := mem.Holder("mixed")
		assert.True(t, held && tok == hs[0].Token(), "hs[0] is the Memory grant")
		assert.IsType(t, &lock.Grant{}, hs[1], "hs[1] is the etcd grant")
		_, err := newMutex(t, etcdtest.Session(t, cli), "mixed").TryLock(ctx)
		assert.ErrorIs(t, err, lock.ErrLocked)
		return nil
	})
	require.NoError(t, err)
	assert.Zero(t, etcdtest.KeyCount(t, cli, m.Prefix()))
	_, held := mem.Holder("mixed")
	assert.False(t, held)
}

// A ctx that ended before LockAll: the error matches it and names the
// first lock in the global order.
func TestLockAllEndedContext(t *testing.T) {
	t.Parallel()
	mem := locktest.NewMemory()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := lock.LockAll(ctx, mem.Locker("b"), mem.Locker("a"))
	require.ErrorIs(t, err, context.Canceled)
	assert.ErrorContains(t, err, "ls[1] (memory:")
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
