package locktest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/internal/testsuite"
	"github.com/dlock-go/dlock/lock"
)

// Semaphore is what RunSemaphore checks: a counting semaphore, such as
// *lock.Semaphore.
type Semaphore interface {
	Acquire(ctx context.Context) (lock.Held, error)
	TryAcquire(ctx context.Context) (lock.Held, error)
}

// SemaphoreBackend describes the semaphore implementation under test.
type SemaphoreBackend struct {
	// New returns a new, independent handle of the semaphore called name
	// with permits permits (its own client or session). Required.
	New func(t *testing.T, name string, permits int) Semaphore
	// Lose makes the service forget grant h behind its holder's back.
	// Required.
	Lose func(t *testing.T, h lock.Held)
	// Timeout bounds every wait. Optional, defaults to DefaultTimeout.
	Timeout time.Duration
}

// RunSemaphore runs the semaphore conformance suite against b.
func RunSemaphore(t *testing.T, b SemaphoreBackend) {
	t.Helper()
	require.NotNil(t, b.New, "SemaphoreBackend.New is required")
	require.NotNil(t, b.Lose, "SemaphoreBackend.Lose is required")
	s := &semSuite{suite: suite{timeout: testsuite.Timeout(b.Timeout)}, b: b}
	t.Run("Permits", s.permits)
	t.Run("NeverMoreThanPermits", s.neverMore)
	t.Run("CancelWhileWaiting", s.cancel)
	t.Run("LossFreesPermit", s.lossFrees)
	t.Run("Release", s.release)
}

type semSuite struct {
	suite
	b SemaphoreBackend
}

// permits: exactly permits TryAcquires succeed; the next is ErrLocked
// until one is released. Tokens are distinct and increase in grant order.
func (s *semSuite) permits(t *testing.T) {
	const n = 3
	nm := name(t)
	ctx := s.ctx(t)
	sem := s.b.New(t, nm, n)
	var held []lock.Held
	for i := range n {
		h, err := sem.TryAcquire(ctx)
		require.NoError(t, err, "TryAcquire %d of %d", i+1, n)
		if len(held) > 0 {
			assert.Greater(t, h.Token().Seq, held[len(held)-1].Token().Seq, "tokens increase in grant order")
		}
		held = append(held, h)
	}
	refused, err := s.b.New(t, nm, n).TryAcquire(ctx)
	assert.ErrorIs(t, err, lock.ErrLocked, "TryAcquire with every permit taken")
	assert.True(t, refused == nil, "a refused TryAcquire returns a nil Held (got %#v)", refused)
	require.NoError(t, held[1].Unlock(ctx))
	h, err := sem.TryAcquire(ctx)
	require.NoError(t, err, "TryAcquire after a release")
	for _, h := range append(held, h) {
		assert.NoError(t, h.Unlock(ctx))
	}
}

// neverMore: handles contend in loops; never more than permits inside,
// and every acquire is granted.
func (s *semSuite) neverMore(t *testing.T) {
	const n, handles, rounds = 2, 5, 4
	nm := name(t)
	ctx := s.ctx(t)
	var inside, most, grants atomic.Int32
	var wg sync.WaitGroup
	for range handles {
		sem := s.b.New(t, nm, n)
		wg.Go(func() {
			for range rounds {
				h, err := sem.Acquire(ctx)
				if !assert.NoError(t, err, "Acquire under contention") {
					return
				}
				in := inside.Add(1)
				testsuite.Raise(&most, in)
				grants.Add(1)
				inside.Add(-1)
				assert.NoError(t, h.Unlock(ctx))
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int32(n), "more holders than permits")
	assert.EqualValues(t, handles*rounds, grants.Load())
}

// cancel: an Acquire that waits returns its ctx's error and leaves
// nothing behind: once a permit is released, TryAcquire succeeds.
func (s *semSuite) cancel(t *testing.T) {
	nm := name(t)
	ctx := s.ctx(t)
	h, err := s.b.New(t, nm, 1).Acquire(ctx)
	require.NoError(t, err)
	dctx, dcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer dcancel()
	_, err = s.b.New(t, nm, 1).Acquire(dctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, h.Unlock(ctx))
	h, err = s.b.New(t, nm, 1).TryAcquire(ctx)
	require.NoError(t, err, "the cancelled Acquire left something behind")
	assert.NoError(t, h.Unlock(ctx))
}

// lossFrees: a lost permit's Done closes, its Unlock reports the loss, and
// a waiter gets the permit.
func (s *semSuite) lossFrees(t *testing.T) {
	nm := name(t)
	ctx := s.ctx(t)
	h, err := s.b.New(t, nm, 1).Acquire(ctx)
	require.NoError(t, err)
	got := make(chan lock.Held, 1)
	go func() {
		w, err := s.b.New(t, nm, 1).Acquire(ctx)
		assert.NoError(t, err)
		got <- w
	}()
	s.b.Lose(t, h)
	select {
	case <-h.Done():
	case <-ctx.Done():
		t.Fatal("Done did not close after the permit was lost")
	}
	assert.ErrorIs(t, h.Unlock(ctx), lock.ErrLockLost)
	select {
	case w := <-got:
		require.NotNil(t, w)
		assert.NoError(t, w.Unlock(ctx))
	case <-ctx.Done():
		t.Fatal("the waiter did not get the lost permit")
	}
}

// release: Unlock twice is nil twice; Err is ErrUnlocked.
func (s *semSuite) release(t *testing.T) {
	ctx := s.ctx(t)
	h, err := s.b.New(t, name(t), 2).Acquire(ctx)
	require.NoError(t, err)
	require.NoError(t, h.Unlock(ctx))
	assert.NoError(t, h.Unlock(ctx))
	assert.True(t, isClosed(h.Done()))
	assert.ErrorIs(t, h.Err(), lock.ErrUnlocked)
}

// RWLocker is what RunRW checks: a reader/writer lock, such as
// *lock.RWMutex. Lock and TryLock are the exclusive side.
type RWLocker interface {
	lock.Locker
	RLock(ctx context.Context) (lock.Held, error)
	TryRLock(ctx context.Context) (lock.Held, error)
}

// RWBackend describes the reader/writer lock under test.
type RWBackend struct {
	// New returns a new, independent handle of the lock called name.
	// Required.
	New func(t *testing.T, name string) RWLocker
	// Timeout bounds every wait. Optional, defaults to DefaultTimeout.
	Timeout time.Duration
}

// RunRW runs the reader/writer conformance suite against b. Run the
// Locker suite (Run) on the same implementation for its exclusive side.
func RunRW(t *testing.T, b RWBackend) {
	t.Helper()
	require.NotNil(t, b.New, "RWBackend.New is required")
	s := &rwSuite{suite: suite{timeout: testsuite.Timeout(b.Timeout)}, b: b}
	t.Run("ReadersShare", s.readersShare)
	t.Run("WriterExcludes", s.writerExcludes)
	t.Run("NoWriterStarvation", s.noStarvation)
	t.Run("Contention", s.contention)
}

type rwSuite struct {
	suite
	b RWBackend
}

// readersShare: several readers hold at once; a writer cannot.
func (s *rwSuite) readersShare(t *testing.T) {
	nm := name(t)
	ctx := s.ctx(t)
	var held []lock.Held
	for range 3 {
		h, err := s.b.New(t, nm).TryRLock(ctx)
		require.NoError(t, err, "TryRLock beside other readers")
		held = append(held, h)
	}
	refused, err := s.b.New(t, nm).TryLock(ctx)
	assert.ErrorIs(t, err, lock.ErrLocked, "TryLock while readers hold")
	assert.True(t, refused == nil, "a refused TryLock returns a nil Held (got %#v)", refused)
	for _, h := range held {
		assert.NoError(t, h.Unlock(ctx))
	}
	h, err := s.b.New(t, nm).TryLock(ctx)
	require.NoError(t, err, "TryLock once the readers left")
	assert.NoError(t, h.Unlock(ctx))
}

// writerExcludes: while a writer holds, neither readers nor writers get
// in; its token is greater than every earlier grant's.
func (s *rwSuite) writerExcludes(t *testing.T) {
	nm := name(t)
	ctx := s.ctx(t)
	r, err := s.b.New(t, nm).RLock(ctx)
	require.NoError(t, err)
	require.NoError(t, r.Unlock(ctx))
	w, err := s.b.New(t, nm).Lock(ctx)
	require.NoError(t, err)
	assert.Greater(t, w.Token().Seq, r.Token().Seq, "a writer's token exceeds an earlier reader's")
	_, err = s.b.New(t, nm).TryRLock(ctx)
	assert.ErrorIs(t, err, lock.ErrLocked, "TryRLock while a writer holds")
	_, err = s.b.New(t, nm).TryLock(ctx)
	assert.ErrorIs(t, err, lock.ErrLocked, "TryLock while a writer holds")
	require.NoError(t, w.Unlock(ctx))
}

// noStarvation: a writer queued behind a reader is granted before a reader
// that came after it.
func (s *rwSuite) noStarvation(t *testing.T) {
	nm := name(t)
	ctx := s.ctx(t)
	r1, err := s.b.New(t, nm).RLock(ctx)
	require.NoError(t, err)
	order := make(chan string, 2)
	var wg sync.WaitGroup
	wg.Go(func() {
		w, err := s.b.New(t, nm).Lock(ctx)
		if assert.NoError(t, err) {
			order <- "writer"
			assert.NoError(t, w.Unlock(ctx))
		}
	})
	// Until the writer is queued, a new reader would get in: wait for
	// TryRLock to be refused (a queued writer blocks later readers).
	late := s.b.New(t, nm)
	require.Eventually(t, func() bool {
		h, err := late.TryRLock(ctx)
		if err == nil {
			h.Unlock(ctx)
		}
		return errors.Is(err, lock.ErrLocked)
	}, s.timeout, 5*time.Millisecond, "the writer never queued")
	wg.Go(func() {
		r2, err := late.RLock(ctx)
		if assert.NoError(t, err) {
			order <- "late reader"
			assert.NoError(t, r2.Unlock(ctx))
		}
	})
	require.NoError(t, r1.Unlock(ctx))
	wg.Wait()
	close(order)
	var got []string
	for o := range order {
		got = append(got, o)
	}
	assert.Equal(t, []string{"writer", "late reader"}, got, "the queued writer goes first")
}

// contention: readers and writers loop; a writer is never inside with
// anyone; readers do overlap; writer tokens strictly increase.
func (s *rwSuite) contention(t *testing.T) {
	const writers, readers, rounds = 2, 4, 4
	nm := name(t)
	ctx := s.ctx(t)
	var rin, win, bad, maxReaders atomic.Int32
	var mu sync.Mutex
	var lastWriter uint64
	var wg sync.WaitGroup
	for range writers {
		l := s.b.New(t, nm)
		wg.Go(func() {
			for range rounds {
				h, err := l.Lock(ctx)
				if !assert.NoError(t, err) {
					return
				}
				if win.Add(1) != 1 || rin.Load() != 0 {
					bad.Add(1)
				}
				mu.Lock()
				assert.Greater(t, h.Token().Seq, lastWriter, "writer tokens increase")
				lastWriter = h.Token().Seq
				mu.Unlock()
				win.Add(-1)
				assert.NoError(t, h.Unlock(ctx))
			}
		})
	}
	for range readers {
		l := s.b.New(t, nm)
		wg.Go(func() {
			for range rounds {
				h, err := l.RLock(ctx)
				if !assert.NoError(t, err) {
					return
				}
				in := rin.Add(1)
				if win.Load() != 0 {
					bad.Add(1)
				}
				testsuite.Raise(&maxReaders, in)
				rin.Add(-1)
				assert.NoError(t, h.Unlock(ctx))
			}
		})
	}
	wg.Wait()
	assert.Zero(t, bad.Load(), "a writer was inside with another grant")
	t.Logf("at most %d readers at once", maxReaders.Load())
}
