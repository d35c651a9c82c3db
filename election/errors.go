package election

import (
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/queue"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

var (
	// ErrNoLeader is returned by Election.Leader when the election has no
	// leader.
	ErrNoLeader = errors.New("election: no leader")

	// ErrLeadershipLost is returned by Proclaim and Resign, and reported by
	// Term.Err, when the term ended before the call: the session's local
	// deadline passed, its lease is gone, or the leader's key was deleted.
	// The error also matches the cause: the session's error (for example
	// session.ErrExpired) or ErrKeyDeleted.
	ErrLeadershipLost = errors.New("election: leadership lost")

	// ErrKeyDeleted is returned by Campaign when the candidate's key was
	// deleted while it waited (by hand, or by a revoke of its lease that the
	// session has not noticed yet), and matched by Term.Err, together with
	// ErrLeadershipLost, when the leader's key was deleted.
	ErrKeyDeleted = errors.New("election: key deleted")

	// ErrResigned is reported by Term.Err, and returned by Proclaim, after a
	// successful Resign.
	ErrResigned = errors.New("election: resigned")

	// ErrSessionDone is returned by Campaign, and by Run, when the session
	// ended before or while campaigning. Campaign never returns a Term in
	// that case. The error also matches the session's error.
	ErrSessionDone = errors.New("election: session done")

	// ErrInvalidName is returned by New and Run for a name that fails
	// lock.ValidateName. It matches lock.ErrInvalidName.
	ErrInvalidName = errs.Also("election: invalid name", lock.ErrInvalidName)

	// ErrInvalidOption is returned by New for a nil session or a bad option,
	// and by Run (and Config.Validate) for a bad Config field; the message
	// names the field.
	ErrInvalidOption = errors.New("election: invalid option")
)

// opErr is the error of operation op on the election called name, from a
// queue cause: the one place where queue causes become this package's
// errors. held says whether the
// operation was on a term (then an end is a loss) or a campaign.
func opErr(name, op string, held bool, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, queue.ErrReleased):
		err = ErrResigned
	case held && errors.Is(err, queue.ErrSessionEnded):
		err = fmt.Errorf("%w: %w", ErrLeadershipLost, queue.SessionCause(err))
	case held && errors.Is(err, queue.ErrEntryGone):
		err = fmt.Errorf("%w: %w", ErrLeadershipLost, ErrKeyDeleted)
	case errors.Is(err, queue.ErrSessionEnded):
		err = fmt.Errorf("%w: %w", ErrSessionDone, queue.SessionCause(err))
	case errors.Is(err, session.ErrManagerClosed):
		err = fmt.Errorf("%w: %w", ErrSessionDone, err)
	case errors.Is(err, queue.ErrEntryGone):
		err = fmt.Errorf("%w while waiting", ErrKeyDeleted)
	}
	return errs.New("election", name, op, err)
}
