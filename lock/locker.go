package lock

import (
	"context"

	"github.com/dlock-go/dlock/fence"
)

// Locker is a named distributed lock. Every backend (the etcd Mutex in this
// package, the Redis and Redlock lockers in package redis) implements it and
// passes the shared conformance suite in lock/locktest.
//
// A Locker is a handle, safe for concurrent use: several goroutines may call
// Lock on one Locker, and each successful call is an independent grant with
// its own Held (two grants never overlap in the lock service's view).
//
// The backends' Lockers (this package's Mutex and RWMutex, package
// redis's Mutex and Redlock, locktest's Memory) also have a method
// LockKey() string, which places them in LockAll's global order; a Locker
// that wraps another should pass it on.
type Locker interface {
	// Lock waits, in the backend's order, until the lock is granted or ctx
	// ends. On ctx end it returns an error matching ctx.Err() and leaves
	// nothing behind in the lock service.
	Lock(ctx context.Context) (Held, error)
	// TryLock returns an error matching ErrLocked at once if someone else
	// holds the lock.
	TryLock(ctx context.Context) (Held, error)
}

// Held is one grant of a lock.
//
// It is NOT safe to assume that the lock is held until Unlock: a pause, a
// partition or a session expiry can end it at any moment. Done closes when
// the grant may have ended; the fencing Token is what makes acting after that
// harmless, at a resource that checks it (package fence).
//
// A Held is safe for concurrent use.
type Held interface {
	// Token returns the grant's fencing token. Seq is 0 for backends without
	// a sound token (Redlock): every guard rejects Seq 0.
	Token() fence.Token
	// Done is closed when the lock may be lost: the backend's local deadline
	// passed, the lock was observed gone, or Unlock was called.
	Done() <-chan struct{}
	// Err returns nil while Done is open, and after that the reason: an
	// error matching ErrLockLost (and its cause), or ErrUnlocked after
	// Unlock.
	Err() error
	// Unlock releases the grant. It never releases a later grant of the same
	// lock; it returns an error matching ErrLockLost if the grant had already
	// ended. Calling it again after success returns nil.
	Unlock(ctx context.Context) error
}
