package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/queue"
	"github.com/dlock-go/dlock/session"
)

// Mutex is the etcd lock: a queue of keys under "<prefix>/<name>/", bound to
// the session's lease and ordered by create revision. The first key holds
// the lock; each waiter watches only its immediate predecessor, so one
// release wakes one waiter. The holder's fencing token is its key's create
// revision: successive holders get strictly increasing tokens, and this
// holds across etcd leader changes and member loss (it is the cluster's
// revision).
//
// Every Lock or TryLock call creates a fresh key, so several calls on one
// Mutex or on several Mutexes sharing a session are independent grants and
// exclude each other. A Mutex is safe for concurrent use.
type Mutex struct {
	s    *session.Session
	name string
	q    queue.Queue
	opts options
}

var (
	_ Locker    = (*Mutex)(nil)
	_ Describer = (*Mutex)(nil)
	_ Held      = (*Grant)(nil)
	_ Errer     = (*Grant)(nil)
)

// New returns the etcd Mutex called name on session s. The name must pass
// ValidateName. New does no I/O.
func New(s *session.Session, name string, opts ...Option) (*Mutex, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: session is nil", ErrInvalidOption)
	}
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	return &Mutex{
		s:    s,
		name: name,
		q:    queue.Queue{Client: s.Client(), Prefix: o.prefix + "/" + name + "/"},
		opts: o,
	}, nil
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.name }

// Prefix returns the etcd key prefix of the lock's queue (ends with "/").
func (m *Mutex) Prefix() string { return m.q.Prefix }

// Capabilities reports the etcd Mutex's guarantees.
func (m *Mutex) Capabilities() Capabilities {
	return Capabilities{FencingTokens: true, FIFO: true, Liveness: LivenessSession, SurvivesFailover: true}
}

// Lock waits in FIFO order until the lock is granted, ctx ends, or the
// session ends. The returned Held is a *Grant. On any error the attempt's key
// is deleted (with a detached, bounded context), so a cancelled Lock leaves
// nothing behind. If the session ends while waiting, Lock returns an error
// matching ErrSessionDone and never the lock.
func (m *Mutex) Lock(ctx context.Context) (Held, error) {
	return m.acquire(ctx, false)
}

// TryLock acquires the lock if nobody holds or waits for it, in one round
// trip; otherwise it returns ErrLocked and creates no key.
func (m *Mutex) TryLock(ctx context.Context) (Held, error) {
	return m.acquire(ctx, true)
}

func (m *Mutex) acquire(ctx context.Context, try bool) (_ Held, err error) {
	if err := m.sessionErr(); err != nil {
		return nil, err
	}
	key := m.q.NewKey(m.s.Lease())
	defer func() {
		if err != nil {
			if cerr := m.q.Cleanup(ctx, key); cerr != nil {
				err = fmt.Errorf("%w (and removing key %q failed: %v)", err, key, cerr)
			}
		}
	}()
	if try {
		e, _, ok, err := m.q.TryEnqueue(ctx, key, m.opts.owner, m.s.Lease())
		if err != nil {
			return nil, m.wrap("try lock", err)
		}
		if !ok {
			return nil, fmt.Errorf("lock %q: %w", m.name, ErrLocked)
		}
		return m.grant(e)
	}
	e, pred, err := m.q.Enqueue(ctx, key, m.opts.owner, m.s.Lease())
	if err != nil {
		return nil, m.wrap("lock", err)
	}
	if err := m.q.Wait(ctx, e, pred, e.Rev, m.s.Done()); err != nil {
		return nil, m.wrap("lock", err)
	}
	return m.grant(e)
}

// grant checks, after the key became first, that the session is still live,
// and ties the grant to the session's end.
func (m *Mutex) grant(e queue.Entry) (Held, error) {
	if err := m.sessionErr(); err != nil {
		return nil, err
	}
	g := &Grant{m: m, e: e, done: make(chan struct{})}
	g.stopHook = m.s.AfterDone(func() { g.end(g.lostBySession()) })
	if g.Err() != nil { // the session ended in between
		return nil, fmt.Errorf("lock %q: %w: %w", m.name, ErrSessionDone, m.s.Err())
	}
	return g, nil
}

func (m *Mutex) sessionErr() error {
	select {
	case <-m.s.Done():
		return fmt.Errorf("lock %q: %w: %w", m.name, ErrSessionDone, m.s.Err())
	default:
		return nil
	}
}

func (m *Mutex) wrap(op string, err error) error {
	switch {
	case errors.Is(err, queue.ErrStopped), errors.Is(err, queue.ErrEntryGone):
		if serr := m.sessionErr(); serr != nil {
			return serr
		}
		return fmt.Errorf("lock %q: %s: key deleted while waiting: %w", m.name, op, ErrSessionDone)
	}
	return fmt.Errorf("lock %q: %s: %w", m.name, op, err)
}

// Grant is one grant of a Mutex: the Held returned by Mutex.Lock and
// TryLock. It is safe for concurrent use.
//
// It is NOT safe to assume that the lock is held until Unlock: pass Token to
// the resource, and stop acting when Done closes.
type Grant struct {
	m *Mutex
	e queue.Entry

	stopHook    func() bool // unregisters the session AfterDone hook
	watchOnce   sync.Once
	cancelWatch context.CancelFunc // stops the watcher; nil if none started
	watchDone   chan struct{}

	mu       sync.Mutex
	done     chan struct{}
	err      error
	released bool // Unlock has run its delete
}

// Token returns the fencing token: the lock's name and the grant key's
// create revision.
func (g *Grant) Token() fence.Token { return fence.Token{Name: g.m.name, Seq: uint64(g.e.Rev)} }

// Key returns the grant's etcd key.
func (g *Grant) Key() string { return g.e.Key }

// Revision returns the grant key's create revision (the token's Seq).
func (g *Grant) Revision() int64 { return g.e.Rev }

// IsOwner returns a comparison that holds only while this grant's key
// exists, for etcd transactions that must commit only under the lock:
//
//	cli.Txn(ctx).If(g.IsOwner()).Then(clientv3.OpPut(k, v)).Commit()
func (g *Grant) IsOwner() clientv3.Cmp { return g.e.Owned() }

// Done returns a channel closed when the lock may be lost: the session's
// local deadline passed or its lease is gone (Done closes before the
// session's own Done), the grant's key was deleted, or Unlock was called.
// The first call starts one watch on the key, which ends with the grant.
func (g *Grant) Done() <-chan struct{} {
	g.watchOnce.Do(g.startWatch)
	return g.done
}

// Err returns nil while the grant looks live, otherwise why it ended: an
// error matching ErrLockLost (and the session's error, if that was the
// cause), or ErrUnlocked.
func (g *Grant) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

func (g *Grant) lostBySession() error {
	return fmt.Errorf("lock %q: %w: %w", g.m.name, ErrLockLost, g.m.s.Err())
}

func (g *Grant) end(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.err = err
		close(g.done)
	}
}

func (g *Grant) startWatch() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return
	}
	// The watch context ends with the session (and its loss is reported by
	// the AfterDone hook) or with Unlock.
	ctx, cancel := context.WithCancel(g.m.s.Context())
	g.cancelWatch, g.watchDone = cancel, make(chan struct{})
	go func() {
		defer close(g.watchDone)
		if g.m.q.WatchGone(ctx, g.e, g.e.Rev+1, nil) {
			g.end(fmt.Errorf("lock %q: key %q deleted: %w", g.m.name, g.e.Key, ErrLockLost))
		}
	}()
}

// Unlock releases the grant with a delete guarded by the key's create
// revision, so it never deletes a later holder's key. It returns an error
// matching ErrLockLost if the grant had already ended (key gone, session
// done); in that case it still deletes the key if it exists, and later
// calls return the same error. After a successful Unlock, later calls
// return nil. If the delete itself fails (ctx ended, etcd unreachable), the
// error says so and Unlock may be retried.
func (g *Grant) Unlock(ctx context.Context) error {
	g.mu.Lock()
	released, ended := g.released, g.err
	g.mu.Unlock()
	if released {
		if errors.Is(ended, ErrUnlocked) {
			return nil
		}
		return ended
	}
	lost := g.Err()
	deleted, err := g.m.q.Remove(ctx, g.e)
	if err != nil {
		return fmt.Errorf("lock %q: unlock: %w", g.m.name, err)
	}
	g.mu.Lock()
	g.released = true
	g.mu.Unlock()
	defer g.stopWatch()
	switch {
	case lost != nil:
		return lost
	case !deleted:
		err := fmt.Errorf("lock %q: unlock: key %q was already gone: %w", g.m.name, g.e.Key, ErrLockLost)
		g.end(err)
		return g.Err()
	}
	g.end(fmt.Errorf("lock %q: %w", g.m.name, ErrUnlocked))
	return nil
}

// stopWatch stops the watcher goroutine, if one runs, and waits for it, and
// unregisters the session hook.
func (g *Grant) stopWatch() {
	g.stopHook()
	g.watchOnce.Do(func() {}) // no watcher may start from now on
	g.mu.Lock()
	cancel, done := g.cancelWatch, g.watchDone
	g.cancelWatch = nil
	g.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}
