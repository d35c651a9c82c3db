package lock

import (
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/internal/grant"
	"github.com/dlock-go/dlock/internal/queue"
	"github.com/dlock-go/dlock/session"
)

// Errors of every backend. Backends with errors of their own (package
// redis) make theirs match these under errors.Is, so callers can match
// across backends. Messages read "pkg: "name": op: cause".
var (
	// ErrLocked is returned by TryLock (and TryAcquire, TryRLock) when the
	// lock is taken: another grant holds it, or waiters are queued.
	ErrLocked = errors.New("lock: locked by another holder")

	// ErrLockLost is returned by Unlock, and reported by Held.Err, when the
	// grant ended before the call: its session ended, its key was deleted,
	// or its validity ran out. The error also matches the cause: the
	// session's error (for example session.ErrExpired) or ErrKeyDeleted.
	ErrLockLost = errors.New("lock: lock lost")

	// ErrUnlocked is reported by Held.Err after a successful Unlock.
	ErrUnlocked = errors.New("lock: unlocked")

	// ErrSessionDone is returned by Lock and TryLock (and the other
	// acquires) when the session ended before or while the lock was being
	// acquired; the error also matches the session's error. It does not
	// match ErrLockLost: a waiter whose session ends never had the lock.
	ErrSessionDone = errors.New("lock: session done")

	// ErrKeyDeleted is returned by Lock when the attempt's key was deleted
	// while it waited (by hand, or by a revoke of its lease that the session
	// has not noticed yet), and matched, with ErrLockLost, by Held.Err and
	// Unlock when a grant's key was deleted.
	ErrKeyDeleted = errors.New("lock: key deleted")

	// ErrPermitsMismatch is returned by Semaphore.Acquire and TryAcquire
	// when the semaphore's holders and waiters were created with another
	// number of permits, or the name is used by a lock that is not a
	// semaphore. Nothing is left behind.
	ErrPermitsMismatch = errors.New("lock: permits mismatch")

	// ErrInvalidName is returned by constructors for a lock name outside the
	// allowed alphabet (see ValidateName).
	ErrInvalidName = errors.New("lock: invalid name")

	// ErrInvalidOption is returned by constructors for a bad option value;
	// the message names the option.
	ErrInvalidOption = errors.New("lock: invalid option")
)

// sentinels maps the queue's causes to this package's errors (see grant.Errors).
var sentinels = &grant.Errors{
	Pkg: "lock", Locked: ErrLocked, Released: ErrUnlocked, Lost: ErrLockLost, KeyDeleted: ErrKeyDeleted,
	SessionDone: ErrSessionDone, LeaseGone: session.ErrLeaseGone, Closed: session.ErrManagerClosed,
	InvalidName: ErrInvalidName, InvalidOption: ErrInvalidOption,
	Permits: func(pe *queue.PermitsError) error {
		return fmt.Errorf("%w: this semaphore has %d permits, %s", ErrPermitsMismatch, pe.Want, holdersOf(pe.Have))
	},
}

func holdersOf(have int) string {
	if have == 0 {
		return "but the name is held by a lock that is not a semaphore"
	}
	return fmt.Sprintf("its holders %d", have)
}
