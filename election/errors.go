package election

import (
	"errors"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/grant"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

// Errors. A term is a grant of the election's lock: each error that means
// what one of package lock's means also matches it (a lost term matches
// lock.ErrLockLost), so code that handles both can match lock's.
var (
	// ErrNoLeader is returned by Election.Leader when the election has no
	// leader.
	ErrNoLeader = errors.New("election: no leader")

	// ErrLeadershipLost is returned by Proclaim and Resign, and reported by
	// Term.Err, when the term ended before the call: the session's local
	// deadline passed, its lease is gone, or the leader's key was deleted.
	// The error also matches the cause: the session's error (for example
	// session.ErrExpired) or ErrKeyDeleted.
	ErrLeadershipLost = errs.Also("election: leadership lost", lock.ErrLockLost)

	// ErrKeyDeleted is returned by Campaign when the candidate's key was
	// deleted while it waited (by hand, or by a revoke of its lease that the
	// session has not noticed yet), and matched by Term.Err, together with
	// ErrLeadershipLost, when the leader's key was deleted.
	ErrKeyDeleted = errs.Also("election: key deleted", lock.ErrKeyDeleted)

	// ErrResigned is reported by Term.Err, and returned by Proclaim, after a
	// successful Resign.
	ErrResigned = errs.Also("election: resigned", lock.ErrUnlocked)

	// ErrSessionDone is returned by Campaign, and by Run, when the session
	// ended before or while campaigning. Campaign never returns a Term in
	// that case. The error also matches the session's error.
	ErrSessionDone = errs.Also("election: session done", lock.ErrSessionDone)

	// ErrInvalidName is returned by New and Run for a name that fails
	// lock.ValidateName.
	ErrInvalidName = errs.Also("election: invalid name", lock.ErrInvalidName)

	// ErrInvalidOption is returned by New for a nil session or a bad option,
	// and by Run for a bad Config field; the message names the field.
	ErrInvalidOption = errs.Also("election: invalid option", lock.ErrInvalidOption)
)

// sentinels maps the queue's causes to this package's errors (see grant.Errors).
var sentinels = &grant.Errors{
	Pkg: "election", Released: ErrResigned, Lost: ErrLeadershipLost, KeyDeleted: ErrKeyDeleted,
	SessionDone: ErrSessionDone, LeaseGone: session.ErrLeaseGone, Closed: session.ErrManagerClosed,
	InvalidName: ErrInvalidName, InvalidOption: ErrInvalidOption,
}
