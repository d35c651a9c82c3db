package fence

import (
	"errors"
	"fmt"
)

var (
	// ErrStaleToken is returned by a Guard when a token's Seq is lower than
	// the highest Seq the guard has admitted for the same Name. Match it with
	// errors.Is; errors.As with *StaleTokenError gives the numbers.
	ErrStaleToken = errors.New("fence: stale token")

	// ErrNoToken is returned by a Guard when a token has Seq 0: the lock that
	// produced it has no sound fencing token (for example Redlock), or the
	// caller forgot to pass one.
	ErrNoToken = errors.New("fence: no token (seq 0)")

	// ErrInvalidToken is returned by ParseToken for a malformed wire form, and
	// by a Guard for a token with an empty Name.
	ErrInvalidToken = errors.New("fence: invalid token")
)

// StaleTokenError describes a rejected token. It matches ErrStaleToken under
// errors.Is.
type StaleTokenError struct {
	Name    string // the lock name
	Seq     uint64 // the rejected token's Seq
	Highest uint64 // the highest Seq already admitted for Name
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fence: stale token for %q: seq %d is below the highest admitted seq %d", e.Name, e.Seq, e.Highest)
}

// Is reports whether target is ErrStaleToken.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }
