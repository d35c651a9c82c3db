package queue

import (
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/internal/attach"
	"github.com/dlock-go/dlock/internal/retry"
)

// Session is what a queue needs of a session: package session's *Session.
// The queue keeps its lease-bound bookkeeping in an attachment of the
// session (internal/attach; see state.go), which the session runs at each
// heartbeat and ends with itself.
type Session interface {
	Lease() clientv3.LeaseID
	Client() *clientv3.Client
	Done() <-chan struct{}
	// Err says why the session ended (matching the session's ErrExpired,
	// ErrLeaseGone or ErrClosed), once Done is closed.
	Err() error
	attach.Owner
}

// ErrLeaseGone is the cause of an acquire whose entry vanished with its
// lease: the lease was revoked or expired before the session noticed.
var ErrLeaseGone = errors.New("queue: lease gone")

// The causes an acquire or a hold reports. Callers map them to their own
// package's errors in one place; every other error is ctx's (an error
// matching ctx.Err()) or etcd's, passed through.
var (
	// ErrOccupied: a try acquire found the entry would not be granted at
	// once. Nothing was left behind.
	ErrOccupied = errors.New("queue: occupied")
	// ErrEntryGone: the entry's key was deleted while it waited or was
	// held (by hand, or by a revoke of the lease that the session has not
	// noticed yet).
	ErrEntryGone = errors.New("queue: entry deleted")
	// ErrSessionEnded: the session ended before or while the entry
	// waited, or while it was held. The error also matches the session's
	// Err.
	ErrSessionEnded = errors.New("queue: session ended")
	// ErrReleased: Hold.Err after a successful Release.
	ErrReleased = errors.New("queue: released")
	// ErrPermits: a semaphore's entry found the queue's first entry made
	// with another number of permits (or by another kind of lock).
	ErrPermits = errors.New("queue: permits mismatch")
)

// endedError is an ErrSessionEnded with the session's cause.
type endedError struct{ cause error }

func (e *endedError) Error() string   { return "queue: session ended: " + e.cause.Error() }
func (e *endedError) Unwrap() []error { return []error{ErrSessionEnded, e.cause} }

// SessionCause returns why the session ended, if err matches
// ErrSessionEnded (session.ErrExpired, session.ErrClosed,
// session.ErrLeaseGone), else nil.
func SessionCause(err error) error {
	var e *endedError
	if errors.As(err, &e) {
		return e.cause
	}
	return nil
}

// PermitsError is an ErrPermits with the two numbers; Have is 0 when the
// first entry is not a semaphore's.
type PermitsError struct{ Want, Have int }

func (e *PermitsError) Error() string {
	if e.Have == 0 {
		return fmt.Sprintf("queue: permits mismatch: the name is held by a lock that is not a semaphore (this one has %d permits)", e.Want)
	}
	return fmt.Sprintf("queue: permits mismatch: this semaphore has %d permits, its holders %d", e.Want, e.Have)
}

func (e *PermitsError) Unwrap() error { return ErrPermits }

// PrefixFor returns the queue prefix of the lock or election name under
// root: root + "/" + name + "/", with every "/" in name written "%2F", so
// that no queue's prefix is a prefix of another's (see "Key names").
func PrefixFor(root, name string) string {
	return root + "/" + strings.ReplaceAll(name, "/", "%2F") + "/"
}

// Queue is one lock's or election's queue of keys under one prefix, with
// the rule that says when an entry is granted. It is safe for concurrent
// use; every Acquire is an independent entry.
type Queue struct {
	cli    *clientv3.Client
	kv     retry.KV // cli's KV, each request riding out an election
	root   string
	prefix string
	rule   Rule

	// Made once from rule and prefix, read by every enqueue.
	keyPrefix  string        // rule.keyPrefix
	joinReads  []clientv3.Op // rule.joinReads; never appended to in place
	vacant     clientv3.Cmp  // rule.vacant, if haveVacant
	haveVacant bool
}

// New returns the queue of name under root (see PrefixFor) on cli, whose
// entries are granted by rule. It does no I/O.
func New(cli *clientv3.Client, root, name string, rule Rule) *Queue {
	q := &Queue{cli: cli, kv: retry.NewKV(cli), root: root, prefix: PrefixFor(root, name), rule: rule}
	q.keyPrefix = rule.keyPrefix(q)
	q.joinReads = rule.joinReads(q)
	q.vacant, q.haveVacant = rule.vacant(q)
	return q
}

// Denied adds to err, if etcd denied a request of the queue for lack of
// permission, which permission the user needs: readwrite on every key
// under the queue's root (its entries, and the side keys beside them).
func (q *Queue) Denied(err error) error {
	if errors.Is(err, rpctypes.ErrPermissionDenied) {
		return fmt.Errorf("%w (the etcd user needs readwrite permission on the keys with prefix %q)", err, q.root+"/")
	}
	return err
}

// Prefix returns the queue's key prefix; it ends with "/".
func (q *Queue) Prefix() string { return q.prefix }

// KeyPrefix returns the prefix of the keys of the queue's own entries:
// Prefix for most rules, Prefix()+"r/" for Reader.
func (q *Queue) KeyPrefix() string { return q.keyPrefix }

// entry is one key in the queue.
type entry struct {
	Key string
	Rev int64 // create revision: the fencing token
}

// Owned returns a Cmp that holds only while e's key exists with e's create
// revision.
func (e entry) Owned() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(e.Key), "=", e.Rev)
}

// ticket is a session's claim on one key name of a queue, from enqueue
// until leave or abandon.
type ticket struct {
	entry
	st     *state
	slot   uint64
	queued bool  // an entry preceded it at its enqueue: it had to wait
	ahead  int64 // entries before it at its enqueue, where the enqueue reads that (a semaphore); else -1
}
