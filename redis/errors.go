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
	// *QuorumError that carries it says how many did and why the others did
	// not.
	ErrNoQuorum = errors.New("redis: no quorum")

	// ErrNotReplicated is returned by Mutex's Lock and TryLock when WithReplicas
	// is set and fewer replicas than asked acknowledged the grant within the
	// timeout. The grant is released before the error is returned.
	ErrNotReplicated = errors.New("redis: grant not acknowledged by enough replicas")
)

// NodeError is the error of one Redlock node.
type NodeError struct {
	Node int    // the node's index in the clients passed to NewRedlock
	Addr string // the node's address, if the client reveals it
	Err  error
}

// Error names the node and quotes its error.
func (e *NodeError) Error() string {
	if e.Addr != "" {
		return fmt.Sprintf("node %d (%s): %v", e.Node, e.Addr, e.Err)
	}
	return fmt.Sprintf("node %d: %v", e.Node, e.Err)
}

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

// QuorumError reports a Redlock operation that did not reach a majority. It
// matches ErrNoQuorum; it also matches ErrLocked when some nodes refused
// because another grant holds the lock there, and ErrLockLost when a
// majority no longer holds this grant (Extend, Unlock).
type QuorumError struct {
	Op     string       // "lock", "try lock", "extend" or "unlock"
	Name   string       // the lock name
	OK     int          // nodes that acted on the request
	Quorum int          // nodes needed: N/2+1
	Nodes  int          // N
	Held   int          // nodes where another grant holds the lock (lock) or this grant is gone (extend, unlock)
	Errs   []*NodeError // nodes that failed, with why
	// Expired is set when a majority granted the lock but the validity left
	// after the fan-out was not positive.
	Expired bool
}

// acquiring reports whether e is an acquire's (Lock or TryLock).
func (e *QuorumError) acquiring() bool { return e.Op == "lock" || e.Op == "try lock" }

// Error says how many nodes acted and why the others did not.
func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redis: %q: %s: no quorum: %d of %d nodes, need %d", e.Name, e.Op, e.OK, e.Nodes, e.Quorum)
	if e.Held > 0 {
		if e.acquiring() {
			fmt.Fprintf(&b, "; held by another grant on %d", e.Held)
		} else {
			fmt.Fprintf(&b, "; grant gone on %d", e.Held)
		}
	}
	if e.Expired {
		b.WriteString("; no validity left after the fan-out")
	}
	for _, ne := range e.Errs {
		b.WriteString("; ")
		b.WriteString(ne.Error())
	}
	return b.String()
}

// Unwrap returns ErrNoQuorum, ErrLocked or ErrLockLost as described on
// QuorumError, and every node error.
func (e *QuorumError) Unwrap() []error {
	errs := []error{ErrNoQuorum}
	if e.Held > 0 && e.acquiring() {
		errs = append(errs, ErrLocked)
	}
	if !e.acquiring() && e.Held > e.Nodes-e.Quorum {
		errs = append(errs, ErrLockLost)
	}
	for _, ne := range e.Errs {
		errs = append(errs, ne)
	}
	return errs
}
