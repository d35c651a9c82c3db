package redis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// tasks runs and counts the background work of one handle (a Mutex or a
// Redlock): a Redlock's requests to each node, commands whose caller
// stopped waiting for them, and the cleanups they trigger once they
// complete. Every such task ends on its own, when its node answers or the
// go-redis client's own timeouts pass (see the package documentation,
// "Stragglers"); Drain waits for them.
//
// A task runs in a worker goroutine that, once the task is done, waits up
// to warmFor for the next task of the handle before it exits. A fresh
// goroutine starts with a small stack and grows it, by copying, on every
// go-redis command (about an eighth of a Redlock's CPU went to that); a
// warm worker has grown it already.
//
// The zero value is ready to use.
type tasks struct {
	warm time.Duration // how long a worker stays warm; 0: warmFor

	mu       sync.Mutex
	n        int           // workers alive (running a task or warm)
	idle     chan struct{} // closed when n drops to 0; nil while n == 0
	handoff  chan func()   // a task for a warm worker
	cool     chan struct{} // closed while a wait runs: workers exit rather than stay warm
	draining int           // waits running
}

// warmFor is how long a worker waits for another task before it exits.
const warmFor = 100 * time.Millisecond

// goTask runs f in a worker counted by t: a warm one if one waits, else a
// new one.
func (t *tasks) goTask(f func()) {
	t.mu.Lock()
	if t.handoff == nil {
		t.handoff, t.cool = make(chan func()), make(chan struct{})
	}
	h := t.handoff
	t.mu.Unlock()
	select {
	case h <- f:
		return
	default:
	}
	t.mu.Lock()
	if t.n == 0 {
		t.idle = make(chan struct{})
	}
	t.n++
	t.mu.Unlock()
	go t.work(h, f)
}

// work runs f, then the tasks handed to it, until it has stayed warm that
// long without one or a wait tells it to exit.
func (t *tasks) work(h chan func(), f func()) {
	defer t.exited()
	warm := t.warm
	if warm <= 0 {
		warm = warmFor
	}
	timer := time.NewTimer(warm)
	defer timer.Stop()
	for {
		f()
		t.mu.Lock()
		cool := t.cool
		t.mu.Unlock()
		timer.Reset(warm)
		select {
		case f = <-h:
		case <-timer.C:
			return
		case <-cool:
			return
		}
	}
}

func (t *tasks) exited() {
	t.mu.Lock()
	t.n--
	if t.n == 0 {
		close(t.idle)
		t.idle = nil
	}
	t.mu.Unlock()
}

// wait returns once no task runs and no worker is left (it tells the warm
// workers to exit), or with ctx's error if ctx ends first.
func (t *tasks) wait(ctx context.Context) error {
	t.mu.Lock()
	if t.cool == nil {
		t.mu.Unlock()
		return nil // no task ever ran
	}
	if t.draining++; t.draining == 1 {
		close(t.cool)
	}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		if t.draining--; t.draining == 0 {
			t.cool = make(chan struct{})
		}
		t.mu.Unlock()
	}()
	for {
		t.mu.Lock()
		idle := t.idle
		t.mu.Unlock()
		if idle == nil {
			return nil
		}
		select {
		case <-idle:
			// A task started since may have made a new idle channel: look again.
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// pending is one call whose result its caller may stop waiting for.
type pending[T any] struct {
	done chan struct{} // closed once v and err are set

	mu        sync.Mutex
	finished  bool // fn returned; v and err are set
	abandoned bool // the caller returned without the result
	v         T
	err       error
}

// call returns fn's result, or ctx's error soon after ctx ends first, so
// that a command on a stalled node (which go-redis, without
// ContextTimeoutEnabled, waits for until its ReadTimeout, and with it still
// does not abandon on a mere cancellation) cannot hold the caller for long
// past ctx. Once ctx ended, call waits at most grace more for fn (a
// responsive node answers within it, and a client that honours ctx
// deadlines gives up at the deadline itself, so that the caller still gets
// the answer and can clean up); then it returns with ok false, and fn goes
// on in a task of ts, late (if not nil) receiving its result in that task.
// fn should pass ctx to go-redis, so that the client gives up where it
// can.
//
// A ctx that cannot end (Done returns nil) runs fn in the caller's
// goroutine, as does any ctx when capped is true: the client honours ctx
// deadlines (ContextTimeoutEnabled), and fn gets ctx with its deadline
// capped at grace from now, so that go-redis itself gives up on a stalled
// node by then, which is at most grace after ctx ends. That path spares
// the hand-off to a goroutine and back (about an eighth of an uncontended
// Lock+Unlock on loopback), and late is never called: a command is never
// left running.
func call[T any](ctx context.Context, ts *tasks, grace time.Duration, capped bool, fn func(ctx context.Context) (T, error), late func(T, error)) (v T, err error, ok bool) {
	if ctx.Done() == nil {
		v, err = fn(ctx)
		return v, err, true
	}
	if capped {
		cctx := ctx
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > grace {
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(ctx, grace)
			defer cancel()
		}
		v, err = fn(cctx)
		if err != nil {
			// go-redis reports a passed deadline as an i/o timeout: say
			// which one passed.
			if cerr := ctx.Err(); cerr != nil {
				if !errors.Is(err, cerr) {
					err = fmt.Errorf("%w: %w", cerr, err)
				}
			} else if cctx.Err() != nil {
				err = fmt.Errorf("no reply within the node timeout (%v): %w", grace, err)
			}
		}
		return v, err, true
	}
	p := &pending[T]{done: make(chan struct{})}
	ts.goTask(func() {
		v, err := fn(ctx)
		p.mu.Lock()
		p.v, p.err, p.finished = v, err, true
		abandoned := p.abandoned
		p.mu.Unlock()
		close(p.done)
		if abandoned && late != nil {
			late(v, err)
		}
	})
	select {
	case <-p.done:
		return p.v, p.err, true
	case <-ctx.Done():
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return p.v, p.err, true
	case <-t.C:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return p.v, p.err, true
	}
	p.abandoned = true
	return v, ctx.Err(), false
}
