// Package grant is the one grant path of dlock's etcd primitives (the
// Mutex, Semaphore and RWMutex of package lock, and package election's
// Campaign): their construction and its checks (New), the session an
// acquire runs on, the queue's acquire, its telemetry, the classification
// of the grant's end, and the mapping of the queue's causes to the calling
// package's errors.
package grant

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/obs"
	"github.com/dlock-go/dlock/internal/queue"
)

// Errors are a package's sentinels for the queue's causes.
type Errors struct {
	Pkg         string // "lock" or "election": the errors' prefix
	Locked      error  // a try acquire refused (nil: the package has none)
	Released    error  // a grant's Err after its release
	Lost        error  // a grant ended before the call; matched with the cause
	KeyDeleted  error  // the entry's key was deleted
	SessionDone error  // the session ended before or while acquiring
	LeaseGone   error  // the cause when an entry vanished with its lease
	Closed      error  // the source is closed (a session.Manager's Close)
	// InvalidName and InvalidOption are the constructors' errors (see
	// New).
	InvalidName, InvalidOption error
	// Permits says what a semaphore's permits mismatch is (nil: the
	// package has no semaphore).
	Permits func(*queue.PermitsError) error
}

// Op returns the error of operation op on the object called name, from a
// queue cause: the one place where the queue's causes become a package's
// errors. held says whether the operation was on a grant (then an end is
// a loss) or an acquire. It returns nil for a nil err.
func (e *Errors) Op(name, op string, held bool, err error) error {
	var pe *queue.PermitsError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, queue.ErrOccupied) && e.Locked != nil:
		err = e.Locked
	case errors.Is(err, queue.ErrReleased):
		err = e.Released
	case errors.As(err, &pe) && e.Permits != nil:
		err = e.Permits(pe)
	case errors.Is(err, queue.ErrSessionEnded):
		ended := e.SessionDone
		if held {
			ended = e.Lost
		}
		err = fmt.Errorf("%w: %w", ended, e.sessionCause(err))
	case held && errors.Is(err, queue.ErrEntryGone):
		err = fmt.Errorf("%w: %w", e.Lost, e.KeyDeleted)
	case errors.Is(err, e.Closed):
		err = fmt.Errorf("%w: %w", e.SessionDone, err)
	case errors.Is(err, queue.ErrEntryGone):
		err = fmt.Errorf("%w while waiting", e.KeyDeleted)
	}
	return errs.New(e.Pkg, name, op, err)
}

// sessionCause is why the session of an ErrSessionEnded ended, in the
// session package's terms.
func (e *Errors) sessionCause(err error) error {
	cause := queue.SessionCause(err)
	if errors.Is(cause, queue.ErrLeaseGone) {
		return e.LeaseGone
	}
	return cause
}

// Path is the grant path of one named object.
type Path struct {
	// Current returns the session for the next acquire (see Sessions).
	Current func(context.Context) (queue.Session, error)
	Client  *clientv3.Client // the client the sessions run on
	Prefix  string           // the etcd key prefix of the queues (see Queue)
	Name    string
	Tel     *obs.T
	Errs    *Errors
	// Term makes a grant a leadership term: it moves the leader gauge, not
	// the held counter.
	Term bool
}

// Acquire runs q's acquire for op ("lock", "try lock", "campaign", ...)
// with val, on the session Current gives, and returns the grant's hold.
// It records the acquire's span and metrics and, when the hold ends, the
// end: a release, or a loss by its cause. Errors are Errs's.
func (p *Path) Acquire(ctx context.Context, q *queue.Queue, op, val string, try bool) (*queue.Hold, error) {
	ctx, a := p.Tel.StartAcquire(ctx, op, p.Name)
	s, err := p.Current(ctx)
	var h *queue.Hold
	if err == nil {
		h, err = q.Acquire(ctx, s, val, try)
	}
	if err != nil {
		err = p.Errs.Op(p.Name, op, false, q.Denied(err))
		a.Failed(obs.OutcomeOf(ctx, err, p.Errs.Locked), err)
		return nil, err
	}
	seq := uint64(h.Rev())
	a.Granted(seq, h.Queued(), h.Ahead())
	if p.Term {
		p.Tel.Elected(p.Name, seq)
	} else {
		p.Tel.Held(p.Name, seq)
	}
	h.OnEnd(func(cause error) {
		kind := lossKind(cause)
		var lost error
		if kind != "" {
			lost = p.Errs.Op(p.Name, "", true, cause)
		}
		if p.Term {
			p.Tel.TermEnded(p.Name, seq, kind, lost)
		} else {
			p.Tel.Ended(p.Name, kind, lost)
		}
	})
	return h, nil
}

// lossKind is the dlock.lost cause of a hold's end, or "" for a release.
func lossKind(cause error) string {
	switch {
	case errors.Is(cause, queue.ErrSessionEnded):
		return obs.LostSession
	case errors.Is(cause, queue.ErrEntryGone):
		return obs.LostDeleted
	}
	return ""
}

// Sessions adapts a source's Current (session.Source's) to Path.Current.
func Sessions[S queue.Session](current func(context.Context) (S, error)) func(context.Context) (queue.Session, error) {
	return func(ctx context.Context) (queue.Session, error) {
		s, err := current(ctx)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

// NilSource reports whether src is nil or a nil pointer (a typed nil
// session), which constructors reject.
func NilSource(src any) bool {
	v := reflect.ValueOf(src)
	return src == nil || v.Kind() == reflect.Pointer && v.IsNil()
}
