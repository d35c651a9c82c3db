package lock

import "errors"

var (
	// ErrLocked is returned by TryLock when another grant holds the lock.
	ErrLocked = errors.New("lock: locked by another holder")

	// ErrLockLost is returned by Unlock (and reported by Held.Err) when the
	// grant ended before the call: its session expired, its key was deleted,
	// or its validity ran out.
	ErrLockLost = errors.New("lock: lock lost")

	// ErrUnlocked is reported by Held.Err after a successful Unlock.
	ErrUnlocked = errors.New("lock: unlocked")

	// ErrSessionDone is returned by Lock and TryLock when the session ended
	// before (or while) the lock was being acquired. It also matches
	// ErrLockLost, because a waiter whose session ends never gets the lock.
	ErrSessionDone = errors.New("lock: session done")

	// ErrInvalidName is returned by constructors for a lock name outside the
	// allowed alphabet (see ValidateName).
	ErrInvalidName = errors.New("lock: invalid name")

	// ErrInvalidOption is returned by constructors for a bad option value;
	// the message names the option.
	ErrInvalidOption = errors.New("lock: invalid option")
)
