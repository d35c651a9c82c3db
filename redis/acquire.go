package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/errs"
)

// attempter makes one acquire attempt. On contention it returns an error
// matching ErrLocked and, if known, how long the current grant has left.
type attempter interface {
	attempt(ctx context.Context) (g *Grant, retryIn time.Duration, err error)
}

// acquire is the Lock loop shared by Mutex and Redlock: attempt; on failure
// subscribe to the release channel on every client, attempt again (so a
// release between the first attempt and the subscription is not missed),
// then wait for a release notification, the jittered backoff (capped by the
// holder's remaining validity), or ctx, and attempt again.
func acquire(ctx context.Context, a attempter, name string, o *options, clients []goredis.UniversalClient, channel string) (*Grant, error) {
	if err := ctx.Err(); err != nil {
		return nil, errs.New("redis", name, "lock", err)
	}
	g, retryIn, err := a.attempt(ctx)
	if g != nil {
		return g, nil
	}
	var w *waker
	defer func() {
		if w != nil {
			w.close()
		}
	}()
	for n := 0; ; n++ {
		if cerr := ctx.Err(); cerr != nil {
			return nil, errs.New("redis", name, "lock", fmt.Errorf("%w (last attempt: %v)", cerr, err))
		}
		if w == nil {
			w = subscribe(ctx, clients, channel, o.nodeTimeout)
		} else {
			d := backoff(n, o.retryMin, o.retryMax)
			if retryIn > 0 && retryIn+time.Millisecond < d {
				d = retryIn + time.Millisecond
			}
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, errs.New("redis", name, "lock", fmt.Errorf("%w (last attempt: %v)", ctx.Err(), err))
			case <-w.c:
			case <-t.C:
			}
			t.Stop()
		}
		g, retryIn, err = a.attempt(ctx)
		if g != nil {
			return g, nil
		}
	}
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
	return half + rand.N(d-half+1)
}

// waker delivers release notifications from one or more servers.
type waker struct {
	c    chan struct{} // receives a value (coalesced) per notification
	subs []*goredis.PubSub
	wg   sync.WaitGroup
}

// subscribe subscribes to channel on every client in parallel and waits for
// each confirmation (bounded by timeout), so that a release published after
// subscribe returns is seen. Clients that fail are left out: their waiters
// fall back to polling.
func subscribe(ctx context.Context, clients []goredis.UniversalClient, channel string, timeout time.Duration) *waker {
	w := &waker{c: make(chan struct{}, 1)}
	subs := make([]*goredis.PubSub, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			ps := c.Subscribe(sctx, channel)
			msg, err := ps.Receive(sctx)
			if _, ok := msg.(*goredis.Subscription); err != nil || !ok {
				_ = ps.Close()
				return
			}
			subs[i] = ps
		})
	}
	wg.Wait()
	for _, ps := range subs {
		if ps == nil {
			continue
		}
		w.subs = append(w.subs, ps)
		w.wg.Go(func() { w.listen(ps) })
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

// close unsubscribes and waits for the listeners to exit.
func (w *waker) close() {
	for _, ps := range w.subs {
		_ = ps.Close()
	}
	w.wg.Wait()
}
