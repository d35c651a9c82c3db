package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/fault"
	"github.com/dlock-go/dlock/internal/obs"
	"github.com/dlock-go/dlock/lock"
)

// grantOps is what a Grant needs from its backend (one node or Redlock).
type grantOps interface {
	// extend resets the grant's expiry to the TTL on the server(s). It
	// returns the time just before the request was sent (the new validity
	// counts from then), or an error: one matching ErrLockLost if the grant
	// is certainly gone, any other if the outcome is unknown.
	extend(ctx context.Context, value string) (time.Time, error)
	// release deletes the grant. It returns an error matching ErrLockLost if
	// the grant was no longer there, any other if the outcome is unknown.
	release(ctx context.Context, value string) error
}

type grantState int

const (
	stateHeld grantState = iota
	stateEnded
)

// Grant is one grant of a Mutex or a Redlock: the lock.Held that their Lock
// and TryLock return. Type-assert to *Grant for Extend, Err and Deadline.
//
// Its local validity ends at Deadline: the time just before the acquire (or
// the last successful Extend) was sent, plus the TTL, minus the drift
// allowance, on the monotonic clock. Done closes then, unless Extend moved
// the deadline first; it also closes when Unlock is called or when Extend
// finds the grant gone. Nothing in between tells the holder that the key was
// deleted behind its back (by an operator, a failover, an eviction): that is
// why the deadline exists, and why a fencing token is checked at the
// resource.
//
// A Grant is safe for concurrent use.
type Grant struct {
	name  string
	token fence.Token
	value string
	ops   grantOps
	ttl   time.Duration
	drift time.Duration
	start time.Time // when the acquire was sent; on internal/fault's clock, as deadline is
	done  chan struct{}
	tel   *obs.T

	unlockMu  sync.Mutex // serialises Unlock
	extendMu  sync.Mutex // serialises Extend
	stopWatch context.CancelFunc
	watchDone chan struct{} // nil without a watchdog

	mu       sync.Mutex
	state    grantState
	err      error // why Done closed
	released bool  // a release finished with a definite answer
	result   error // what Unlock returns once released
	deadline time.Time
	timer    *time.Timer
}

var _ lock.Held = (*Grant)(nil)

// newGrant records a new grant in tel (dlock.held goes up) and starts the
// validity timer (and the watchdog, if o asks for it) of a grant whose
// acquire was sent at start. The caller has checked that the deadline is
// still ahead.
func newGrant(name string, seq uint64, value string, ops grantOps, o *options, start time.Time, tel *obs.T) *Grant {
	g := &Grant{
		name:  name,
		token: fence.Token{Name: name, Seq: seq},
		value: value,
		ops:   ops,
		ttl:   o.ttl,
		drift: o.driftAllowance(),
		start: start,
		done:  make(chan struct{}),
		tel:   tel,
	}
	g.deadline = start.Add(g.ttl - g.drift)
	tel.Held(name, seq) // before the timer, which may end the grant at once
	g.mu.Lock()
	defer g.mu.Unlock()
	g.timer = time.AfterFunc(fault.Until(g.deadline), g.expire)
	if o.autoExtend {
		ctx, cancel := context.WithCancel(context.Background())
		g.stopWatch = cancel
		g.watchDone = make(chan struct{})
		go g.watch(ctx, o.maxHold)
	}
	return g
}

// Token returns the grant's fencing token: the INCR value for a Mutex, Seq 0
// (no token) for a Redlock.
func (g *Grant) Token() fence.Token { return g.token }

// Done is closed when the grant may have ended: its local deadline passed,
// Extend found it gone, or Unlock was called.
func (g *Grant) Done() <-chan struct{} { return g.done }

// Err returns nil while Done is open; then an error matching ErrLockLost
// (and lock.ErrLockLost) if the grant was lost, or lock.ErrUnlocked after
// Unlock.
func (g *Grant) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Deadline returns the end of the grant's local validity, on the monotonic
// clock. Done closes then unless Extend moves it.
func (g *Grant) Deadline() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.deadline
}

// Extend resets the grant's validity to a full TTL, counted from just before
// the request is sent. It never re-acquires: if the key expired or belongs
// to another grant, or the local deadline passed before the reply arrived,
// the grant is lost, Done closes, and Extend returns an error matching
// ErrLockLost. Any other error (a timeout, a node down) leaves the grant and
// its old deadline as they were.
func (g *Grant) Extend(ctx context.Context) error {
	if err := g.Err(); err != nil {
		return errs.New("redis", g.name, "extend", err)
	}
	g.extendMu.Lock()
	defer g.extendMu.Unlock()
	start, err := g.ops.extend(ctx, g.value)

	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != stateHeld {
		return errs.New("redis", g.name, "extend", g.err)
	}
	if !fault.Now().Before(g.deadline) {
		g.endLocked(g.expiredErr(), obs.LostExpired)
		return g.err
	}
	if err != nil {
		if errors.Is(err, ErrLockLost) {
			g.endLocked(errs.New("redis", g.name, "extend", err), obs.LostDeleted)
			return g.err
		}
		return errs.New("redis", g.name, "extend", err)
	}
	if nd := start.Add(g.ttl - g.drift); nd.After(g.deadline) {
		g.deadline = nd
		g.timer.Reset(fault.Until(nd))
	}
	return nil
}

// Unlock releases the grant with a compare-and-delete, so it never deletes a
// later grant's key, and wakes the waiters (a Mutex's oldest waiter; a
// Redlock's, all of them). Done closes at once. It returns nil if the
// grant was still held, an error matching ErrLockLost if it had ended first
// (its deadline passed, or its key was gone), and another error if the
// outcome is unknown (no answer within the node timeout or before ctx
// ended), in which case calling Unlock again retries. After a nil return,
// Unlock returns nil again. Unlock waits for the grant's watchdog, if
// any, to exit.
//
// The Unlock that ends a held grant records its end once its release has
// answered (or given up): a release, or a loss (dlock.lost, cause
// "deleted") if the key was already gone.
func (g *Grant) Unlock(ctx context.Context) error {
	g.unlockMu.Lock()
	defer g.unlockMu.Unlock()

	g.mu.Lock()
	if g.released {
		defer g.mu.Unlock()
		return g.result
	}
	ending := g.state == stateHeld // this call ends the grant
	if ending {
		g.endLocked(lock.ErrUnlocked, "")
	}
	g.mu.Unlock()
	if g.watchDone != nil {
		<-g.watchDone
	}

	// Release even a lost grant: its key may still be on the server (the
	// local deadline runs out before the server's), and deleting it lets the
	// next holder in sooner. The compare-and-delete keeps this safe.
	rerr := g.ops.release(ctx, g.value)

	g.mu.Lock()
	defer g.mu.Unlock()
	res := g.settleLocked(rerr)
	if ending {
		// Only the first release's answer tells a loss: a retry after an
		// unknown outcome may find the key deleted by that first release.
		if g.err != lock.ErrUnlocked {
			g.tel.Ended(g.name, obs.LostDeleted, g.err)
		} else {
			g.tel.Ended(g.name, "", nil)
		}
	}
	return res
}

// settleLocked records the outcome rerr of a release and returns what
// Unlock returns for it. A definite outcome (deleted, or not there) is
// final: Unlock returns the same from then on. g.mu must be held, and the
// grant must have ended.
func (g *Grant) settleLocked(rerr error) error {
	if g.released {
		return g.result
	}
	wasLost := g.err != lock.ErrUnlocked
	switch {
	case rerr == nil || errors.Is(rerr, ErrLockLost):
		g.released = true
		if rerr != nil && !wasLost {
			g.err = errs.New("redis", g.name, "unlock", rerr)
			wasLost = true
		}
		if wasLost {
			g.result = g.err
		}
		return g.result
	case wasLost:
		return errs.New("redis", g.name, "unlock", fmt.Errorf("%w (and the release failed: %v)", g.err, rerr))
	default:
		return errs.New("redis", g.name, "unlock", rerr)
	}
}

// expire runs on the validity timer.
func (g *Grant) expire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != stateHeld || fault.Now().Before(g.deadline) {
		return // ended already, or extended after the timer fired
	}
	g.endLocked(g.expiredErr(), obs.LostExpired)
}

func (g *Grant) expiredErr() error {
	return errs.New("redis", g.name, "", fmt.Errorf("local validity ran out: %w", ErrLockLost))
}

// endLocked ends the grant with err: Done closes, the timer and the watchdog
// stop. A loss (lostCause not "") is recorded before Done closes, so that
// whoever sees Done closed sees it counted; Unlock records a release
// itself. g.mu must be held.
func (g *Grant) endLocked(err error, lostCause string) {
	g.state = stateEnded
	g.err = err
	if lostCause != "" {
		g.tel.Ended(g.name, lostCause, err)
	}
	close(g.done)
	g.timer.Stop()
	if g.stopWatch != nil {
		g.stopWatch()
	}
}

// watch extends the grant every TTL/3 until ctx ends (Unlock, loss), the
// grant is lost, or it has been held for maxHold (if positive).
func (g *Grant) watch(ctx context.Context, maxHold time.Duration) {
	defer close(g.watchDone)
	interval := g.ttl / 3
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if maxHold > 0 && fault.Since(g.start) >= maxHold {
			return
		}
		ectx, cancel := context.WithTimeout(ctx, interval)
		err := g.Extend(ectx)
		cancel()
		if err != nil && g.Err() != nil {
			return
		}
		t.Reset(interval)
	}
}
