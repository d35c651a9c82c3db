package lock

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/queue"
	"github.com/dlock-go/dlock/session"
)

// Mutex is the etcd lock: a queue of keys under "<prefix>/<name>/" (each "/"
// in the name written "%2F", see Prefix), bound to
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
	s        *session.Session
	name     string
	q        queue.Queue
	opts     options
	unlocked error // what Grant.Err reports after Unlock
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
		s:        s,
		name:     name,
		q:        queue.Queue{Client: s.Client(), Prefix: queue.PrefixFor(o.prefix, name)},
		opts:     o,
		unlocked: fmt.Errorf("lock %q: %w", name, ErrUnlocked),
	}, nil
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.name }

// Prefix returns the etcd key prefix of the lock's queue: "<prefix>/<name>/"
// with each "/" in the name written "%2F", so that the queue of "a" does
// not range over the keys of "a/b".
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

func (m *Mutex) acquire(ctx context.Context, try bool) (Held, error) {
	if err := m.sessionErr(); err != nil {
		return nil, err
	}
	// Every request and watch of the acquire stops when the session ends,
	// even while etcd is unreachable.
	bctx, cancel := queue.BindSession(ctx, m.s)
	defer cancel()
	if try {
		t, _, ok, err := m.q.TryJoin(bctx, m.s, m.opts.owner)
		if err != nil {
			return nil, m.wrap(bctx, "try lock", err)
		}
		if !ok {
			return nil, fmt.Errorf("lock %q: %w", m.name, ErrLocked)
		}
		return m.grant(ctx, t)
	}
	t, pred, err := m.q.Join(bctx, m.s, m.opts.owner)
	if err != nil {
		return nil, m.wrap(bctx, "lock", err)
	}
	if err := m.q.Wait(bctx, t.Entry, pred, t.Rev+1); err != nil {
		return nil, m.q.AbandonAfter(ctx, m.s, t, m.wrap(bctx, "lock", err))
	}
	return m.grant(ctx, t)
}

// grant ties t to the session's end; it fails if the session ended before.
func (m *Mutex) grant(ctx context.Context, t queue.Ticket) (Held, error) {
	g := &Grant{m: m}
	g.h = queue.NewHold(m.q, m.s, t, g.lostBySession, g.lostByDelete)
	if g.Err() != nil { // the session ended before the grant
		g.h.Stop()
		return nil, m.q.AbandonAfter(ctx, m.s, t, fmt.Errorf("lock %q: %w: %w", m.name, ErrSessionDone, m.s.Err()))
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

// wrap describes an acquire error; bctx is the acquire's context from
// queue.BindSession.
func (m *Mutex) wrap(bctx context.Context, op string, err error) error {
	switch {
	case queue.SessionEnded(bctx):
		return m.sessionErr()
	case errors.Is(err, queue.ErrEntryGone):
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
	h *queue.Hold
}

// Token returns the fencing token: the lock's name and the grant key's
// create revision.
func (g *Grant) Token() fence.Token { return fence.Token{Name: g.m.name, Seq: uint64(g.Revision())} }

// Key returns the grant's etcd key.
func (g *Grant) Key() string { return g.h.Ticket().Key }

// Revision returns the grant key's create revision (the token's Seq).
func (g *Grant) Revision() int64 { return g.h.Ticket().Rev }

// IsOwner returns a comparison that holds only while this grant's key
// exists, for etcd transactions that must commit only under the lock:
//
//	cli.Txn(ctx).If(g.IsOwner()).Then(clientv3.OpPut(k, v)).Commit()
func (g *Grant) IsOwner() clientv3.Cmp { return g.h.Ticket().Owned() }

// Done returns a channel closed when the lock may be lost: the session's
// local deadline passed or its lease is gone (Done closes before the
// session's own Done), the grant's key was deleted, or Unlock was called.
// The first call starts one watch on the key, which ends with the grant.
func (g *Grant) Done() <-chan struct{} { return g.h.Done() }

// Err returns nil while the grant looks live, otherwise why it ended: an
// error matching ErrLockLost (and the session's error, if that was the
// cause), or ErrUnlocked.
func (g *Grant) Err() error { return g.h.Err() }

func (g *Grant) lostBySession() error {
	return fmt.Errorf("lock %q: %w: %w", g.m.name, ErrLockLost, g.m.s.Err())
}

func (g *Grant) lostByDelete() error {
	return fmt.Errorf("lock %q: key %q deleted: %w", g.m.name, g.Key(), ErrLockLost)
}

// Unlock releases the grant with a delete guarded by the key's create
// revision, so it never deletes a later holder's key. It returns an error
// matching ErrLockLost if the grant had already ended (key gone, session
// done), without I/O if that was known (the key is gone or goes with the
// lease), and later calls return the same error. After a successful Unlock,
// later calls return nil. If the delete itself fails (ctx ended, etcd
// unreachable), the error says so and Unlock may be retried.
func (g *Grant) Unlock(ctx context.Context) error {
	err := g.h.Release(ctx, g.m.unlocked)
	if err != nil && !errors.Is(err, ErrLockLost) {
		return fmt.Errorf("lock %q: unlock: %w", g.m.name, err)
	}
	return err
}
