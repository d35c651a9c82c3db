package locktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/testsuite"
	"github.com/dlock-go/dlock/lock"
)

// DefaultTimeout bounds every wait of the suite when Backend.Timeout is zero.
const DefaultTimeout = testsuite.DefaultTimeout

// Contention parameters of the mutual-exclusion test.
const (
	handles      = 2 // Lockers contending for one lock
	perHandle    = 2 // goroutines locking through each Locker
	perGoroutine = 5 // grants each goroutine takes
)

// BadNames are lock names that every backend must reject with an error
// matching lock.ErrInvalidName.
var BadNames = []string{"", "a//b", "../x", "/lead", "trail/", "sp ace", "x/./y"}

// Backend describes the Locker implementation under test.
type Backend struct {
	// New returns a new, independent Locker for the lock called name. Each
	// call may use its own client or session; calls with the same name
	// contend for the same lock. It fails t on error. Required.
	New func(t *testing.T, name string) lock.Locker

	// Lose makes the lock service forget grant h behind its holder's back
	// (delete the key, revoke the session), so that h.Done must close and
	// h.Unlock must return an error matching lock.ErrLockLost. Required.
	Lose func(t *testing.T, h lock.Held)

	// Construct calls the backend's constructor for name and returns its
	// error; the suite checks that BadNames are rejected with
	// lock.ErrInvalidName and that a good name is accepted. Optional: if
	// nil, the bad-name test is skipped.
	Construct func(name string) error

	// Bad lists constructor calls with bad input (nil clients, bad
	// options), by description; each must return an error. Optional.
	Bad map[string]func() error

	// Timeout bounds every wait: an acquire, Done closing after Lose.
	// Optional, defaults to DefaultTimeout.
	Timeout time.Duration
}

// Run runs the conformance suite against b, as subtests of t. Each subtest
// uses its own lock names, so b may share one lock service among them.
func Run(t *testing.T, b Backend) {
	t.Helper()
	require.NotNil(t, b.New, "Backend.New is required")
	require.NotNil(t, b.Lose, "Backend.Lose is required")
	s := &suite{b: b, timeout: testsuite.Timeout(b.Timeout)}
	t.Run("MutualExclusion", s.mutualExclusion)
	t.Run("TryLock", s.tryLock)
	t.Run("CancelWhileWaiting", s.cancelWhileWaiting)
	t.Run("DoneOnLoss", s.doneOnLoss)
	t.Run("UnlockAfterLoss", s.unlockAfterLoss)
	t.Run("DoubleUnlock", s.doubleUnlock)
	t.Run("Relock", s.relock)
	t.Run("Tokens", s.tokens)
	t.Run("BadNames", s.badNames)
	t.Run("BadInput", s.badInput)
}

type suite struct {
	b       Backend
	timeout time.Duration
}

var nameSeq atomic.Uint64

// name returns a fresh lock name for t: unique within the process, and
// prefixed with the time so runs against a shared service do not collide.
func name(t *testing.T) string {
	return fmt.Sprintf("locktest/%d-%d", time.Now().UnixNano(), nameSeq.Add(1))
}

func (s *suite) ctx(t *testing.T) context.Context {
	return testsuite.Context(t, s.timeout)
}

// mustLock acquires l within the suite's timeout.
func (s *suite) mustLock(t *testing.T, l lock.Locker) lock.Held {
	t.Helper()
	h, err := l.Lock(s.ctx(t))
	require.NoError(t, err, "Lock")
	require.NotNil(t, h, "Lock returned a nil Held without error")
	return h
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// mutualExclusion: goroutines on several handles contend; at most one is
// ever inside, and with fencing tokens each holder's token is strictly
// greater than the previous holder's and admitted by a MemoryGuard.
func (s *suite) mutualExclusion(t *testing.T) {
	n := name(t)
	guard := fence.NewMemoryGuard()
	var (
		inside   atomic.Int32
		overlaps atomic.Int32
		grants   atomic.Int32
		mu       sync.Mutex
		lastSeq  uint64
	)
	ctx := s.ctx(t)
	var wg sync.WaitGroup
	for range handles {
		l := s.b.New(t, n)
		for range perHandle {
			wg.Go(func() {
				for range perGoroutine {
					h, err := l.Lock(ctx)
					if !assert.NoError(t, err, "Lock under contention") {
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					grants.Add(1)
					tok := h.Token()
					if tok.Seq != 0 { // a backend with fencing tokens (see Tokens)
						mu.Lock()
						assert.Greater(t, tok.Seq, lastSeq, "token of a later holder must be greater")
						lastSeq = tok.Seq
						mu.Unlock()
						assert.NoError(t, guard.Admit(ctx, tok), "guard must admit the current holder's token")
					}
					assert.False(t, isClosed(h.Done()), "Done closed while held")
					inside.Add(-1)
					assert.NoError(t, h.Unlock(ctx), "Unlock")
				}
			})
		}
	}
	wg.Wait()
	assert.Zero(t, overlaps.Load(), "two holders inside at once")
	assert.EqualValues(t, handles*perHandle*perGoroutine, grants.Load(), "grants")
}

// tryLock: ErrLocked while held (through another handle and through the
// same one), success after Unlock.
func (s *suite) tryLock(t *testing.T) {
	n := name(t)
	ctx := s.ctx(t)
	l1, l2 := s.b.New(t, n), s.b.New(t, n)

	h1, err := l1.TryLock(ctx)
	require.NoError(t, err, "TryLock on a free lock")
	assert.False(t, isClosed(h1.Done()), "Done closed while held")

	h, err := l2.TryLock(ctx)
	assert.ErrorIs(t, err, lock.ErrLocked, "TryLock through another handle while held")
	assert.True(t, h == nil, "a refused TryLock returns a nil Held, not a nil pointer in a non-nil interface (got %#v)", h)
	_, err = l1.TryLock(ctx)
	assert.ErrorIs(t, err, lock.ErrLocked, "TryLock through the same handle while held")

	require.NoError(t, h1.Unlock(ctx), "Unlock")
	h2, err := l2.TryLock(ctx)
	require.NoError(t, err, "TryLock after Unlock")
	assert.NoError(t, h2.Unlock(ctx), "Unlock")
}

// cancelWhileWaiting: a waiting Lock returns an error matching its ctx's
// error, and leaves nothing behind: once the holder unlocks, TryLock
// succeeds at once.
func (s *suite) cancelWhileWaiting(t *testing.T) {
	n := name(t)
	ctx := s.ctx(t)
	holder, waiter := s.b.New(t, n), s.b.New(t, n)
	h := s.mustLock(t, holder)

	dctx, dcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer dcancel()
	_, err := waiter.Lock(dctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "Lock past its deadline")

	cctx, ccancel := context.WithCancel(ctx)
	stop := time.AfterFunc(20*time.Millisecond, ccancel)
	defer stop.Stop()
	_, err = waiter.Lock(cctx)
	assert.ErrorIs(t, err, context.Canceled, "Lock whose ctx is cancelled while waiting")

	_, err = waiter.Lock(cctx)
	assert.ErrorIs(t, err, context.Canceled, "Lock with an already cancelled ctx")
	_, err = waiter.TryLock(cctx)
	assert.Error(t, err, "TryLock with an already cancelled ctx")

	require.NoError(t, h.Unlock(ctx), "Unlock")
	h2, err := waiter.TryLock(ctx)
	require.NoError(t, err, "TryLock after the cancelled waiters and the holder left: something was left behind")
	assert.NoError(t, h2.Unlock(ctx), "Unlock")
}

// doneOnLoss: after Lose, Done closes (within the timeout), Err says why,
// and the lock can be taken again.
func (s *suite) doneOnLoss(t *testing.T) {
	n := name(t)
	ctx := s.ctx(t)
	l := s.b.New(t, n)
	h := s.mustLock(t, l)
	require.False(t, isClosed(h.Done()), "Done closed right after Lock")

	s.b.Lose(t, h)
	select {
	case <-h.Done():
	case <-ctx.Done():
		require.FailNow(t, "Done did not close after the grant was lost", "waited %v", s.timeout)
	}
	assert.ErrorIs(t, h.Err(), lock.ErrLockLost, "Err after loss")
	assert.ErrorIs(t, h.Unlock(ctx), lock.ErrLockLost, "Unlock after Done closed on loss")

	h2 := s.mustLock(t, s.b.New(t, n))
	assert.NoError(t, h2.Unlock(ctx), "Unlock of the next grant")
}

// unlockAfterLoss: Unlock right after Lose (without waiting for Done)
// reports the loss, and does not release a later grant.
func (s *suite) unlockAfterLoss(t *testing.T) {
	n := name(t)
	ctx := s.ctx(t)
	h := s.mustLock(t, s.b.New(t, n))
	s.b.Lose(t, h)
	assert.ErrorIs(t, h.Unlock(ctx), lock.ErrLockLost, "Unlock after loss")
	assert.True(t, isClosed(h.Done()), "Done open after Unlock")

	other := s.b.New(t, n)
	h2 := s.mustLock(t, other)
	assert.ErrorIs(t, h.Unlock(ctx), lock.ErrLockLost, "a second Unlock of the lost grant")
	_, err := s.b.New(t, n).TryLock(ctx)
	assert.ErrorIs(t, err, lock.ErrLocked, "the lost grant's Unlock released the next holder")
	assert.NoError(t, h2.Unlock(ctx), "Unlock of the next grant")
}

// doubleUnlock: Unlock, then Unlock again, both nil; Done closed; Err is
// lock.ErrUnlocked.
func (s *suite) doubleUnlock(t *testing.T) {
	ctx := s.ctx(t)
	h := s.mustLock(t, s.b.New(t, name(t)))
	require.NoError(t, h.Unlock(ctx), "first Unlock")
	assert.NoError(t, h.Unlock(ctx), "second Unlock")
	assert.True(t, isClosed(h.Done()), "Done open after Unlock")
	assert.ErrorIs(t, h.Err(), lock.ErrUnlocked, "Err after Unlock")
}

// relock: the same handle locks, unlocks and locks again; with fencing the
// second token is greater.
func (s *suite) relock(t *testing.T) {
	ctx := s.ctx(t)
	l := s.b.New(t, name(t))
	h1 := s.mustLock(t, l)
	require.NoError(t, h1.Unlock(ctx), "Unlock")
	h2 := s.mustLock(t, l)
	if h1.Token().Seq != 0 {
		assert.Greater(t, h2.Token().Seq, h1.Token().Seq, "token of the second grant")
	} else {
		assert.Zero(t, h2.Token().Seq, "a backend without fencing tokens gives none, ever")
	}
	assert.NoError(t, h2.Unlock(ctx), "Unlock")
}

// tokens: a grant's Token names the lock; a backend either gives fencing
// tokens (Seq > 0, which a fresh guard admits) or none (Seq 0, which every
// guard rejects), never some of each (see Relock).
func (s *suite) tokens(t *testing.T) {
	ctx := s.ctx(t)
	n := name(t)
	l := s.b.New(t, n)
	h := s.mustLock(t, l)
	tok := h.Token()
	assert.Equal(t, n, tok.Name, "Token().Name is the lock name")
	err := fence.NewMemoryGuard().Admit(ctx, tok)
	if tok.Seq != 0 {
		assert.NoError(t, err, "a fresh guard admits a fencing token")
	} else {
		assert.ErrorIs(t, err, fence.ErrNoToken, "a guard must reject the token of a backend without fencing tokens")
	}
	assert.NoError(t, h.Unlock(ctx), "Unlock")
}

// badNames: the constructor rejects BadNames with lock.ErrInvalidName.
func (s *suite) badNames(t *testing.T) {
	if s.b.Construct == nil {
		t.Skip("Backend.Construct not set")
	}
	for _, n := range BadNames {
		assert.ErrorIs(t, s.b.Construct(n), lock.ErrInvalidName, "name %q", n)
	}
	assert.NoError(t, s.b.Construct("good/name-1.x_y"), "a valid name")
}

// badInput: every Bad constructor call returns an error.
func (s *suite) badInput(t *testing.T) {
	if len(s.b.Bad) == 0 {
		t.Skip("Backend.Bad not set")
	}
	for what, call := range s.b.Bad {
		err := call()
		if assert.Error(t, err, what) {
			assert.False(t, errors.Is(err, lock.ErrLocked) || errors.Is(err, lock.ErrLockLost), "%s: a bad input error, not a lock state: %v", what, err)
		}
	}
}
