package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/internal/fault"
	"github.com/dlock-go/dlock/internal/retry"
)

// Session is what a queue needs of a session: package session's *Session.
// The queue keeps its lease-bound bookkeeping in an attachment of the
// session (see state.go), which the session runs at each heartbeat and
// ends with itself.
type Session interface {
	Lease() clientv3.LeaseID
	Client() *clientv3.Client
	Done() <-chan struct{}
	// Err says why the session ended (matching the session's ErrExpired,
	// ErrLeaseGone or ErrClosed), once Done is closed.
	Err() error
	Attach(key any, mk func() Attachment) Attachment
}

// Attachment is session.Attachment: the same interface type, so that
// *session.Session is a Session without this package importing it.
type Attachment = interface {
	Heartbeat(ctx context.Context)
	End(err error)
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
)

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
	keys     string        // rule.keyPrefix
	reads    []clientv3.Op // rule.joinReads; never appended to in place
	free     clientv3.Cmp  // rule.free, if haveFree
	haveFree bool
}

// New returns the queue of name under root (see PrefixFor) on cli, whose
// entries are granted by rule. It does no I/O.
func New(cli *clientv3.Client, root, name string, rule Rule) *Queue {
	q := &Queue{cli: cli, kv: retry.NewKV(cli), root: root, prefix: PrefixFor(root, name), rule: rule}
	q.keys = rule.keyPrefix(q)
	q.reads = rule.joinReads(q)
	q.free, q.haveFree = rule.free(q)
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
func (q *Queue) KeyPrefix() string { return q.keys }

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

// Acquire enqueues an entry holding val, bound to s's lease, and waits
// until q's rule grants it; with try it does not wait but fails with
// ErrOccupied. It returns the entry's Hold.
//
// Every request and watch of the acquire stops when s ends, even while etcd
// is unreachable. On any error the entry's key is removed (with a detached,
// bounded context), so nothing is left behind, and the error is one of:
// ErrOccupied; ErrEntryGone; ErrSessionEnded (also matching s.Err()); an
// error matching ctx.Err() when ctx ended; or etcd's error.
func (q *Queue) Acquire(ctx context.Context, s Session, val string, try bool) (*Hold, error) {
	if err := ended(s); err != nil {
		return nil, err
	}
	bctx, cancel := bind(ctx, stateOf(s))
	defer cancel()
	// An enqueue that failed in an election is sent again: its key was
	// removed, or voided if it was applied unseen ("Late writes").
	type enqueued struct {
		t     ticket
		reads []*pb.ResponseOp
	}
	en, err := retry.Do(bctx, func(ctx context.Context) (enqueued, error) {
		t, reads, err := q.enqueue(ctx, s, val, try)
		return enqueued{t, reads}, err
	})
	if err != nil {
		return nil, cause(ctx, bctx, s, err)
	}
	t, reads := en.t, en.reads
	if !fault.Planted(fault.SkipCheck) { // the planted bug: granted without waiting
		err = q.rule.wait(bctx, q, t.entry, reads)
	}
	if err != nil {
		if errors.Is(err, ErrEntryGone) && q.leaseGone(bctx, s) {
			err = &endedError{ErrLeaseGone}
		}
		return nil, cause(ctx, bctx, s, withCleanup(err, t, q.abandon(ctx, s, t, false)))
	}
	h := newHold(q, t)
	if err := h.Err(); err != nil { // the session ended just before the grant
		h.stop()
		return nil, err
	}
	return h, nil
}

// leaseGone reports whether s's lease is gone on the server: an entry that
// vanished while waiting was taken by a revoke of the lease (which the
// session has not noticed yet) rather than by hand. One request, on that
// rare path only.
func (q *Queue) leaseGone(ctx context.Context, s Session) bool {
	resp, err := retry.Do(ctx, func(ctx context.Context) (*clientv3.LeaseTimeToLiveResponse, error) {
		return q.cli.TimeToLive(ctx, s.Lease())
	})
	return err == nil && resp.TTL == -1
}

// ended returns ErrSessionEnded, matching s.Err(), if s has ended.
func ended(s Session) error {
	select {
	case <-s.Done():
		return &endedError{s.Err()}
	default:
		return nil
	}
}

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

// errBound is the cause of a context from bind that was cancelled because
// the session ended.
var errBound = errors.New("session ended")

// bind returns a copy of ctx that is also cancelled, with cause errBound,
// when st's session ends. Call cancel when done.
func bind(ctx context.Context, st *state) (context.Context, context.CancelFunc) {
	bctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(st.ctx, func() { cancel(errBound) })
	return bctx, func() { stop(); cancel(nil) }
}

// cause says why an acquire failed with err: the session's end (which also
// explains an entry gone: the lease took it), ctx's end, or err itself.
func cause(ctx, bctx context.Context, s Session, err error) error {
	if serr := ended(s); serr != nil && (errors.Is(context.Cause(bctx), errBound) || errors.Is(err, ErrEntryGone)) {
		return serr
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	return err
}
