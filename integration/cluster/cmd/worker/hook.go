package main

import (
	"errors"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/fault"
	"github.com/dlock-go/dlock/session"
)

// sessionEnds keeps what the library's session-end hook
// (fault.OnSessionEnd, real only with the tag dlock_faults) reported: per
// lease, the session's local deadline and why it ended. It is safe for
// concurrent use: the hook runs in the goroutine that ends a session.
//
// The hook runs synchronously in session.end, before any grant on the
// session ends and before the session's Done closes. So once a grant's
// Done is seen closed because its session ended, that session's report is
// already here (the channel close orders the hook's write before the
// read): the lookups never wait.
type sessionEnds struct {
	mu     sync.Mutex
	leases map[int64]sessionEnd
	last   sessionEnd // the most recent report
}

// sessionEnd is one report of the hook.
type sessionEnd struct {
	lease    int64
	deadline time.Time // wall clock, real time even under a clock-rate seam
	err      error
}

// watchSessionEnds registers the hook (process-wide) and returns its
// reports.
func watchSessionEnds() *sessionEnds {
	e := &sessionEnds{leases: make(map[int64]sessionEnd)}
	fault.OnSessionEnd(func(lease int64, deadline time.Time, err error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		r := sessionEnd{lease: lease, deadline: deadline, err: err}
		e.leases[lease] = r
		e.last = r
	})
	return e
}

// deadline returns End.Deadline for a grant on the session with lease
// that ended with grantErr: the session's local deadline (Unix ns) if the
// grant ended because its session passed that deadline, else 0. ok is
// false if the grant ended with its session but the hook reported no end
// for that lease (a build without the tag, or a broken seam).
func (e *sessionEnds) deadline(lease int64, grantErr error) (ns int64, ok bool) {
	e.mu.Lock()
	r, found := e.leases[lease]
	e.mu.Unlock()
	return expiredAt(r, found, grantErr)
}

// lastDeadline is deadline for the session that ended last. The election
// workload uses it: election.Run opens each candidate session itself and
// does not show its lease, but a worker runs one candidate, whose sessions
// follow each other (Run closes one before opening the next), so the
// session of the term whose Done just closed is the last one that ended.
func (e *sessionEnds) lastDeadline(grantErr error) (ns int64, ok bool) {
	e.mu.Lock()
	r := e.last
	e.mu.Unlock()
	return expiredAt(r, r.err != nil, grantErr)
}

// expiredAt applies the rule: a deadline only for a grant lost with its
// session (grantErr matches session.ErrExpired), on a session whose end was
// its local deadline passing (ErrExpired but not ErrLeaseGone: when the
// server reported the lease gone, the deadline did not end it).
func expiredAt(r sessionEnd, found bool, grantErr error) (int64, bool) {
	if !errors.Is(grantErr, session.ErrExpired) {
		return 0, true // unlocked, key deleted: not the session's deadline
	}
	if !found {
		return 0, false
	}
	if errors.Is(r.err, session.ErrExpired) && !errors.Is(r.err, session.ErrLeaseGone) {
		return r.deadline.UnixNano(), true
	}
	return 0, true
}
