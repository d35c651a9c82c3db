package lock

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/grant"
	"github.com/dlock-go/dlock/internal/queue"
	"github.com/dlock-go/dlock/session"
)

// Mutex is the etcd lock: a queue of keys under "<prefix>/<name>/" (each
// "/" in the name written "%2F", see Prefix), bound to the session's lease
// and ordered by create revision. The first key holds the lock; each waiter
// watches only its immediate predecessor, so one release wakes one waiter.
// The holder's fencing token is its key's create revision: successive
// holders get strictly increasing tokens, and this holds across etcd leader
// changes and member loss (it is the cluster's revision).
//
// Every Lock or TryLock call creates a fresh key, so several calls on one
// Mutex or on several Mutexes sharing a session are independent grants and
// exclude each other. A Mutex is safe for concurrent use.
//
// Each acquire runs on the session its Source gives at that moment: on a
// *session.Session, every grant shares that one lease, and once the
// session has ended every Lock fails with ErrSessionDone (make a new
// session and Mutex); on a *session.Manager, the next Lock after a session
// ended runs on a fresh session, while the grants of the old one report
// their loss.
type Mutex struct {
	base
	q *queue.Queue
}

// base is what every etcd lock of this package has (see newBase).
type base struct {
	opts options
	path grant.Path
}

var (
	_ Locker = (*Mutex)(nil)
	_ Held   = (*Grant)(nil)
)

// New returns the etcd Mutex called name on src: a *session.Session or a
// *session.Manager. The name must pass ValidateName; a nil source or a bad
// option returns an error matching ErrInvalidOption. New does no I/O.
func New(src session.Source, name string, opts ...Option) (*Mutex, error) {
	b, err := newBase(src, name, opts)
	if err != nil {
		return nil, err
	}
	rule := queue.Exclusive
	if b.opts.lockDelay > 0 {
		rule = queue.ExclusiveDelay(b.opts.lockDelay)
	}
	return &Mutex{base: b, q: b.path.Queue(rule)}, nil
}

// Prefix returns the etcd key prefix of the lock's queue: "<prefix>/<name>/"
// with each "/" in the name written "%2F", so that the queue of "a" does
// not range over the keys of "a/b".
func (m *Mutex) Prefix() string { return m.q.Prefix() }

// LockKey returns the lock's place in LockAll's order: "etcd:" and Prefix.
// An RWMutex of the same name and prefix has the same LockKey: it is the
// same lock.
func (m *Mutex) LockKey() string { return "etcd:" + m.Prefix() }

// Lock waits in FIFO order until the lock is granted, ctx ends, or the
// session ends. The returned Held is a *Grant. On any error the attempt's
// key is deleted (with a detached, bounded context), so a cancelled Lock
// leaves nothing behind. If the session ends while waiting, Lock returns an
// error matching ErrSessionDone and never the lock; if the attempt's key is
// deleted while waiting, one matching ErrKeyDeleted.
func (m *Mutex) Lock(ctx context.Context) (Held, error) {
	return m.acquire(ctx, m.q, "lock", false)
}

// TryLock acquires the lock if nobody holds or waits for it, in one round
// trip; otherwise it returns an error matching ErrLocked and creates no key.
func (m *Mutex) TryLock(ctx context.Context) (Held, error) {
	return m.acquire(ctx, m.q, "try lock", true)
}

// acquire runs q's acquire for op on the grant path, and returns the
// grant (a *Grant), or a nil Held on failure (never a nil *Grant in a
// non-nil interface).
func (b *base) acquire(ctx context.Context, q *queue.Queue, op string, try bool) (Held, error) {
	h, err := b.path.Acquire(ctx, q, op, b.opts.owner, try)
	if err != nil {
		return nil, err
	}
	return &Grant{name: b.path.Name, h: h}, nil
}

// Grant is one grant of an etcd lock: the Held returned by Mutex.Lock and
// TryLock (and by the Semaphore's and RWMutex's acquires). It is safe for
// concurrent use.
//
// It is NOT safe to assume that the lock is held until Unlock: pass Token to
// the resource, and stop acting when Done closes.
type Grant struct {
	name string
	h    *queue.Hold
}

// Token returns the fencing token: the lock's name and the grant key's
// create revision.
func (g *Grant) Token() fence.Token { return fence.Token{Name: g.name, Seq: uint64(g.h.Rev())} }

// Key returns the grant's etcd key.
func (g *Grant) Key() string { return g.h.Key() }

// IsOwner returns a comparison that holds only while this grant's key
// exists, for etcd transactions that must commit only under the lock:
//
//	cli.Txn(ctx).If(g.IsOwner()).Then(clientv3.OpPut(k, v)).Commit()
func (g *Grant) IsOwner() clientv3.Cmp { return g.h.Owned() }

// Done returns a channel closed when the lock may be lost: the session's
// local deadline passed or its lease is gone (Done closes before the
// session's own Done), the grant's key was deleted, or Unlock was called.
// From the first call on, the session checks the grant's key at each
// heartbeat (no watch or goroutine per grant): a deletion by someone else
// closes Done within one heartbeat interval.
func (g *Grant) Done() <-chan struct{} { return g.h.Done() }

// Err returns nil while the grant looks live, otherwise why it ended: an
// error matching ErrLockLost and its cause (the session's error, or
// ErrKeyDeleted), or ErrUnlocked.
func (g *Grant) Err() error { return sentinels.Op(g.name, "", true, g.h.Err()) }

// Unlock releases the grant with a delete guarded by the key's create
// revision, so it never deletes a later holder's key. It returns an error
// matching ErrLockLost if the grant had already ended (key gone, session
// done), without I/O if that was known (the key is gone or goes with the
// lease), and later calls return the same error. After a successful Unlock,
// later calls return nil. If the delete itself fails (ctx ended, etcd
// unreachable), the error says so and Unlock may be retried.
func (g *Grant) Unlock(ctx context.Context) error {
	return sentinels.Op(g.name, "unlock", true, g.h.Release(ctx))
}
