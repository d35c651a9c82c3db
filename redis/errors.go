package redis

import (
	"errors"
	"fmt"
	"strings"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/lock"
)

// Errors. The first four also match the backend-neutral sentinels of package
// lock under errors.Is, so callers can match across backends.
var (
	// ErrLocked is returned by TryLock when another grant holds the lock. It
	// matches lock.ErrLocked.
	ErrLocked = errs.Also("redis: locked by another holder", lock.ErrLocked)

	// ErrLockLost is returned by Unlock and Extend (and reported by
	// Grant.Err) when the grant ended first: its local validity ran out, or
	// the key was found deleted or owned by another grant. It matches
	// lock.ErrLockLost.
	ErrLockLost = errs.Also("redis: lock lost", lock.ErrLockLost)

	// ErrInvalidOption is returned by New and NewRedlock for a nil or missing
	// client or a bad option value; the message names the field. It matches
	// lock.ErrInvalidOption.
	ErrInvalidOption = errs.Also("redis: invalid option", lock.ErrInvalidOption)

	// ErrInvalidName is returned by New and NewRedlock for a lock name that
	// lock.ValidateName rejects. It matches lock.ErrInvalidName.
	ErrInvalidName = errs.Also("redis: invalid name", lock.ErrInvalidName)

	// ErrNoQuorum is returned by Redlock's Lock, TryLock, Extend and Unlock
	// when fewer than a majority of the nodes acted on the request. The
	// message says how many did and why each of the others did not.
	ErrNoQuorum = errors.New("redis: no quorum")

	// ErrNotReplicated is returned by Mutex's Lock and TryLock when WithReplicas
	// is set and fewer replicas than asked acknowledged the grant within the
	// timeout. The grant is released before the error is returned.
	ErrNotReplicated = errors.New("redis: grant not acknowledged by enough replicas")
)

// quorumError reports a Redlock operation that did not reach a majority.
// It matches ErrNoQuorum; also ErrLocked when some nodes refused because
// another grant holds the lock there, ErrLockLost when a majority no
// longer holds this grant (extend, unlock), and each node's error.
type quorumError struct {
	op      string  // "lock", "try lock", "extend" or "unlock"
	name    string  // the lock name
	ok      int     // nodes that acted on the request
	quorum  int     // nodes needed: N/2+1
	nodes   int     // N
	held    int     // nodes where another grant holds the lock (acquire) or this grant is gone
	errs    []error // one per node that failed, naming it
	expired bool    // a majority granted, but no validity was left after the fan-out
}

// acquiring reports whether e is an acquire's (Lock or TryLock).
func (e *quorumError) acquiring() bool { return e.op == "lock" || e.op == "try lock" }

func (e *quorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redis: %q: %s: no quorum: %d of %d nodes, need %d", e.name, e.op, e.ok, e.nodes, e.quorum)
	if e.held > 0 {
		if e.acquiring() {
			fmt.Fprintf(&b, "; held by another grant on %d", e.held)
		} else {
			fmt.Fprintf(&b, "; grant gone on %d", e.held)
		}
	}
	if e.expired {
		b.WriteString("; no validity left after the fan-out")
	}
	for _, err := range e.errs {
		b.WriteString("; ")
		b.WriteString(err.Error())
	}
	return b.String()
}

func (e *quorumError) Unwrap() []error {
	errs := []error{ErrNoQuorum}
	if e.held > 0 && e.acquiring() {
		errs = append(errs, ErrLocked)
	}
	if !e.acquiring() && e.held > e.nodes-e.quorum {
		errs = append(errs, ErrLockLost)
	}
	return append(errs, e.errs...)
}

// nodeError names node i (and its address, if known) in err.
func nodeError(i int, addr string, err error) error {
	if addr != "" {
		return fmt.Errorf("node %d (%s): %w", i, addr, err)
	}
	return fmt.Errorf("node %d: %w", i, err)
}
