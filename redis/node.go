package redis

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/cleanup"
)

// node is how a lock reaches one Redis deployment (a node, a Sentinel
// master, a Cluster): every command runs in the caller's goroutine, on a
// client whose reads and writes end by a deadline, so that a stalled node
// (a paused process or VM, which accepts connections and answers nothing)
// holds no call for longer than that.
//
// go-redis bounds a read by the ctx deadline only with
// ContextTimeoutEnabled; otherwise by the client's ReadTimeout. So:
//   - a client with ContextTimeoutEnabled runs the commands itself, under
//     a ctx whose deadline is capped at the bound;
//   - a *goredis.Client without it (plain or Sentinel failover) runs them
//     on client.WithTimeout(bound): a view that shares the client's
//     connection pool (not its hooks: go-redis v9.23 runs none on it, see
//     TestViewRunsNoHooks), and owns nothing to close;
//   - a *goredis.ClusterClient without it runs them on the same view of
//     the master of the key's slot;
//   - any other client (a Ring or a type of the user's without
//     ContextTimeoutEnabled) runs them itself, bounded only by its own
//     timeouts.
type node struct {
	client  goredis.UniversalClient // the user's: background work is counted against it (Drain)
	timeout time.Duration           // the node timeout
	mode    nodeMode
	fast    *goredis.Client // modeView: client.WithTimeout(timeout)
}

type nodeMode int

const (
	modeCtx     nodeMode = iota // honours ctx deadlines, or nothing better is known
	modeView                    // a *goredis.Client without ContextTimeoutEnabled
	modeCluster                 // a *goredis.ClusterClient without ContextTimeoutEnabled
)

func newNode(c goredis.UniversalClient, timeout time.Duration) node {
	n := node{client: c, timeout: timeout}
	switch cl := c.(type) {
	case *goredis.Client:
		if !cl.Options().ContextTimeoutEnabled {
			n.mode, n.fast = modeView, cl.WithTimeout(timeout)
		}
	case *goredis.ClusterClient:
		if !cl.Options().ContextTimeoutEnabled {
			n.mode = modeCluster
		}
	}
	return n
}

// on returns the client that runs a command on key with its reads and
// writes bounded by d.
func (n *node) on(ctx context.Context, key string, d time.Duration) (goredis.UniversalClient, error) {
	switch n.mode {
	case modeView:
		if d == n.timeout {
			return n.fast, nil
		}
		return n.client.(*goredis.Client).WithTimeout(d), nil
	case modeCluster:
		m, err := n.client.(*goredis.ClusterClient).MasterForKey(ctx, key)
		if err != nil {
			return nil, err
		}
		return m.WithTimeout(d), nil
	}
	return n.client, nil
}

// do runs fn in the caller's goroutine with ctx and the client's reads and
// writes bounded by d from now (the node timeout, unless a longer wait is
// known to be needed). Its error says which deadline passed.
func (n *node) do(ctx context.Context, key string, d time.Duration, fn func(ctx context.Context, c goredis.UniversalClient) error) error {
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	c, err := n.on(cctx, key, d)
	if err == nil {
		err = fn(cctx, c)
	}
	if err == nil {
		return nil
	}
	if n.mode == modeCluster && isRedirect(err) {
		// The slot moved: the master we asked is out of date.
		n.client.(*goredis.ClusterClient).ReloadState(ctx)
	}
	// go-redis reports a passed deadline as an i/o timeout: say which
	// one passed.
	switch cerr := ctx.Err(); {
	case cerr != nil && !errors.Is(err, cerr):
		err = fmt.Errorf("%w: %w", cerr, err)
	case cerr == nil && (cctx.Err() != nil || isTimeout(err)):
		err = fmt.Errorf("no reply within the node timeout (%v): %w", d, err)
	}
	return err
}

// cleanup runs fn in the background, counted against the node's client
// (see Drain), bounded by cleanup.Timeout rather than the node timeout, so
// that a delete that must follow a command with an unknown outcome still
// reaches a node that stalled and resumes.
func (n *node) cleanup(ctx context.Context, key string, fn func(ctx context.Context, c goredis.UniversalClient) error) {
	goCounted(n.client, func() { n.cleanupNow(ctx, key, fn) })
}

// cleanupNow is cleanup in the caller's goroutine.
func (n *node) cleanupNow(ctx context.Context, key string, fn func(ctx context.Context, c goredis.UniversalClient) error) {
	_ = n.do(context.WithoutCancel(ctx), key, cleanup.Timeout, fn)
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

func isRedirect(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "MOVED ") || strings.HasPrefix(s, "ASK ")
}

// checkClient rejects a nil client (also a typed nil of a go-redis type)
// and one that cannot be told apart from others (not comparable).
func checkClient(c goredis.UniversalClient, field string) error {
	nilClient := c == nil
	switch cl := c.(type) {
	case *goredis.Client:
		nilClient = cl == nil
	case *goredis.ClusterClient:
		nilClient = cl == nil
	case *goredis.Ring:
		nilClient = cl == nil
	}
	if nilClient {
		return fmt.Errorf("%w: %s is nil", ErrInvalidOption, field)
	}
	if !reflect.TypeOf(c).Comparable() {
		return fmt.Errorf("%w: %s: a %T cannot be compared with other clients; pass a pointer", ErrInvalidOption, field, c)
	}
	return nil
}

// counted is the work that locks run in goroutines of their own, per
// client: a Redlock's request to each node, which goes on after the call
// decided without it, and the deletes that follow a command whose outcome
// is unknown. An entry lives while it has goroutines, so the map holds
// only the clients with work under way or workers still warm.
//
// A task runs on a worker that, once the task is done, waits up to
// warmFor for the next task of the same client before it exits. A fresh
// goroutine starts with a small stack and grows it, by copying, on every
// go-redis command (a Redlock's CPU went to that); a warm worker has
// grown it already.
var counted = struct {
	sync.Mutex
	on map[goredis.UniversalClient]*work
}{on: make(map[goredis.UniversalClient]*work)}

// warmFor is how long a worker waits for another task before it exits.
var warmFor = 100 * time.Millisecond

// work is one client's workers. Its fields are guarded by counted's lock.
type work struct {
	n        int           // workers alive: running a task, or warm
	idle     chan struct{} // closed when n drops to 0 (the entry is then gone)
	handoff  chan func()   // a task for a warm worker
	cool     chan struct{} // closed while a Drain waits: workers exit rather than stay warm
	draining int           // Drains waiting
}

// goCounted runs f on a worker of c's: a warm one if one waits, else a
// new one.
func goCounted(c goredis.UniversalClient, f func()) {
	counted.Lock()
	w := counted.on[c]
	counted.Unlock()
	if w != nil {
		select {
		case w.handoff <- f:
			return
		default:
		}
	}
	counted.Lock()
	w = counted.on[c] // it may have gone meanwhile
	if w == nil {
		w = &work{idle: make(chan struct{}), handoff: make(chan func()), cool: make(chan struct{})}
		counted.on[c] = w
	}
	w.n++
	counted.Unlock()
	go w.run(c, f)
}

// run runs f, then the tasks handed to it, until it has stayed warm for
// warmFor without one or a Drain tells it to exit.
func (w *work) run(c goredis.UniversalClient, f func()) {
	defer func() {
		counted.Lock()
		if w.n--; w.n == 0 {
			close(w.idle)
			delete(counted.on, c)
		}
		counted.Unlock()
	}()
	timer := time.NewTimer(warmFor)
	defer timer.Stop()
	for {
		f()
		counted.Lock()
		cool := w.cool
		counted.Unlock()
		timer.Reset(warmFor)
		select {
		case f = <-w.handoff:
		case <-timer.C:
			return
		case <-cool:
			return
		}
	}
}

// Drain waits until no lock of this package has work left running in the
// background on clients (on any client, if none is given), or ctx ends
// (then it returns an error matching ctx.Err()). That work ends on its own,
// within cleanup bounds of a few seconds: a Redlock's requests to nodes
// that had not answered when its call decided, and the deletes that follow
// a command whose outcome is unknown. Call Drain before closing a client,
// so that those deletes still reach their node. When Drain returns, no
// goroutine of the package's is left for those clients (it also ends the
// workers that stay warm for the next call); locks stay usable during and
// after it.
func Drain(ctx context.Context, clients ...goredis.UniversalClient) error {
	for {
		counted.Lock()
		var w *work
		if len(clients) == 0 {
			for _, x := range counted.on {
				w = x
				break
			}
		}
		for _, c := range clients {
			if c == nil || !reflect.TypeOf(c).Comparable() {
				continue // no lock takes it: it has no work
			}
			if w = counted.on[c]; w != nil {
				break
			}
		}
		if w == nil {
			counted.Unlock()
			return nil
		}
		if w.draining++; w.draining == 1 {
			close(w.cool)
		}
		counted.Unlock()
		var err error
		select {
		case <-w.idle:
		case <-ctx.Done():
			err = fmt.Errorf("redis: drain: %w", ctx.Err())
		}
		counted.Lock()
		if w.draining--; w.draining == 0 {
			w.cool = make(chan struct{})
		}
		counted.Unlock()
		if err != nil {
			return err
		}
	}
}
