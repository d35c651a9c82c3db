package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/obs"
	"github.com/dlock-go/dlock/lock"
)

// attempter is what the Lock loop needs from a backend.
type attempter interface {
	// attempt makes one acquire attempt for op ("lock" or "try lock", which
	// its errors name), as the waiter wid ("" for none: the first attempt
	// of a Lock, and TryLock). On contention it returns
	// an error matching ErrLocked and, if known, how long the current
	// grant has left.
	attempt(ctx context.Context, op, wid string) (g *Grant, retryIn time.Duration, err error)
	// subscribe starts listening for the releases that concern waiter wid.
	subscribe(ctx context.Context, wid string) *waker
	// leave unregisters waiter wid, in the background, when its Lock gives up.
	leave(ctx context.Context, wid string)
}

// acquire is the Lock loop shared by Mutex and Redlock: attempt; on failure
// subscribe to the release channel (on every node of a Redlock), attempt
// again (so a release between the first attempt and the subscription is not
// missed), then wait for a wake-up, the jittered backoff (capped by the
// holder's remaining validity), or ctx, and attempt again. queued reports
// that the grant came after the first attempt was refused or failed.
//
// Only a grant's release wakes a Redlock's waiters. An attempt that fails
// deletes its partial keys without a wake-up (discardScript): woken, every
// waiter would retry at once and split the nodes again. So a waiter that
// only such keys refused learns that they are gone by polling: a Redlock
// attempt reports no retryIn, so its attempts are at most retryMax apart
// (plus the attempt's own round, at most the node timeout), and it finds
// a key gone within that of its delete. A failed attempt deletes its keys
// within the node timeout of its decision (a node that had not answered,
// when its reply comes), or in the background, within cleanup.Timeout,
// if that delete got no reply; at the latest the key's TTL ends it.
func acquire(ctx context.Context, a attempter, name string, o *options) (g *Grant, queued bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, errs.New("redis", name, "lock", err)
	}
	g, retryIn, err := a.attempt(ctx, "lock", "")
	if g != nil {
		return g, false, nil
	}
	// last is the last refusal that was not the caller's ctx ending: what
	// the error quotes when Lock gives up (an attempt cut short by ctx
	// says nothing about why the lock was not granted).
	last := err
	wid := newWaiterID()
	var w *waker
	defer func() {
		if w != nil {
			w.close()
		}
	}()
	giveUp := func(cerr error) (*Grant, bool, error) {
		if w != nil {
			a.leave(ctx, wid)
		}
		return nil, false, errs.New("redis", name, "lock", fmt.Errorf("%w (last attempt: %v)", cerr, last))
	}
	for n := 0; ; n++ {
		if cerr := ctx.Err(); cerr != nil {
			return giveUp(cerr)
		}
		if w == nil {
			w = a.subscribe(ctx, wid)
		} else {
			d := backoff(n, o.retryMin, o.retryMax)
			if retryIn > 0 && retryIn+time.Millisecond < d {
				d = retryIn + time.Millisecond
			}
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return giveUp(ctx.Err())
			case <-w.c:
			case <-t.C:
			}
			t.Stop()
		}
		g, retryIn, err = a.attempt(ctx, "lock", wid)
		if g != nil {
			return g, true, nil
		}
		if ctx.Err() == nil {
			last = err
		}
	}
}

// observe runs one acquire (op "lock" or "try lock") of the lock called
// name under its span, and records its duration by outcome.
// lockWith is the Lock of a Mutex or Redlock a: acquire, observed.
func lockWith(ctx context.Context, a attempter, tel *obs.T, name string, o *options) (lock.Held, error) {
	return observe(ctx, tel, name, "lock", func(ctx context.Context) (*Grant, bool, error) {
		return acquire(ctx, a, name, o)
	})
}

// tryLockWith is the TryLock of a Mutex or Redlock a: one attempt,
// observed.
func tryLockWith(ctx context.Context, a attempter, tel *obs.T, name string) (lock.Held, error) {
	return observe(ctx, tel, name, "try lock", func(ctx context.Context) (*Grant, bool, error) {
		if err := ctx.Err(); err != nil {
			return nil, false, errs.New("redis", name, "try lock", err)
		}
		g, _, err := a.attempt(ctx, "try lock", "")
		return g, false, err
	})
}

func observe(ctx context.Context, tel *obs.T, name, op string, fn func(ctx context.Context) (*Grant, bool, error)) (lock.Held, error) {
	ctx, a := tel.StartAcquire(ctx, op, name)
	g, queued, err := fn(ctx)
	if err != nil {
		a.Failed(obs.OutcomeOf(ctx, err, ErrLocked), err)
		return nil, err
	}
	a.Granted(g.token.Seq, queued, -1)
	return g, nil
}

// backoff returns the n-th delay (n ≥ 1) of a jittered exponential backoff:
// uniform in [d/2, d] with d = min·2^(n-1), capped at max.
func backoff(n int, min, max time.Duration) time.Duration {
	d := min
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	half := d / 2
	return half + mrand.N(d-half+1)
}

// newWaiterID returns a fresh ID for one waiting Lock: 64 random bits.
func newWaiterID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return hex.EncodeToString(b[:])
}

// waker delivers wake-ups from one or more servers. Its goroutines (one
// per node: a subscription, then its listener) belong to the Lock call
// that made it, not to the background work that Drain waits for: close
// ends them and waits for them.
type waker struct {
	c chan struct{} // receives a value (coalesced) per notification

	mu     sync.Mutex
	closed bool
	subs   []*goredis.PubSub
	wg     sync.WaitGroup
}

// subscribe subscribes to channel on every node (on the client that runs
// commands on key there, bounded by the node timeout), each in a goroutine
// of the waker, and waits until need of them confirmed, every node
// answered, the node timeout passed or ctx ended, so that a release
// published after subscribe returns reaches a confirmed subscription (for
// Redlock, need is a majority: it meets every majority a release deletes
// from). A node that confirms later joins then; one that fails is left
// out, and its waiter falls back to polling.
func subscribe(ctx context.Context, nodes []*node, key, channel string, need int) *waker {
	w := &waker{c: make(chan struct{}, 1)}
	answers := make(chan bool, len(nodes))
	timeout := nodes[0].timeout
	for _, n := range nodes {
		w.wg.Go(func() {
			var ps *goredis.PubSub
			ok := n.do(ctx, key, timeout, func(ctx context.Context, c goredis.UniversalClient) error {
				ps = c.Subscribe(ctx, channel)
				msg, err := ps.Receive(ctx)
				if _, ok := msg.(*goredis.Subscription); err == nil && !ok {
					err = fmt.Errorf("subscribe: got %T", msg)
				}
				return err
			}) == nil
			w.mu.Lock()
			if !ok || w.closed {
				w.mu.Unlock()
				if ps != nil {
					_ = ps.Close()
				}
				answers <- false
				return
			}
			w.subs = append(w.subs, ps)
			w.mu.Unlock()
			answers <- true
			w.listen(ps)
		})
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for confirmed, answered := 0, 0; confirmed < need && answered < len(nodes); answered++ {
		select {
		case ok := <-answers:
			if ok {
				confirmed++
			}
		case <-timer.C:
			return w
		case <-ctx.Done():
			return w
		}
	}
	return w
}

// listen forwards notifications until ps is closed or fails; a failure is
// forwarded too, as a harmless extra attempt.
func (w *waker) listen(ps *goredis.PubSub) {
	for {
		msg, err := ps.Receive(context.Background())
		if err == nil {
			if _, ok := msg.(*goredis.Message); !ok {
				continue
			}
		}
		select {
		case w.c <- struct{}{}:
		default:
		}
		if err != nil {
			return
		}
	}
}

// close unsubscribes and waits for the waker's goroutines: the listeners
// exit at once, and a subscription still under way (a stalled node)
// within the node timeout.
func (w *waker) close() {
	w.mu.Lock()
	w.closed = true
	subs := w.subs
	w.mu.Unlock()
	for _, ps := range subs {
		_ = ps.Close()
	}
	w.wg.Wait()
}
