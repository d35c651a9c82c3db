package queue

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/internal/cleanup"
	"github.com/dlock-go/dlock/internal/fault"
	"github.com/dlock-go/dlock/internal/retry"
)

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
	bctx, cancel := bind(ctx, s)
	defer cancel()
	// An enqueue that failed in an election is sent again: it left
	// nothing (an enqueue of unknown outcome voids itself first: "Late
	// writes").
	en, err := retry.Do(bctx, func(ctx context.Context) (enqueued, error) {
		return q.enqueue(ctx, s, val, try)
	})
	if err != nil {
		return nil, cause(ctx, bctx, s, err)
	}
	// The grant: the rule judges the enqueue's reads, then waits. A try
	// acquire that would wait is occupied (with a vacant compare the Txn
	// refused it already; without one, Shared's, it is judged here).
	t := en.t
	t.queued, t.ahead = q.rule.queuedAtJoin(en.reads)
	err = q.rule.admit(en.reads)
	over := try && fault.Planted(fault.TryOvergrant) && q.overgrant(t) // the plant TryOvergrant: one permit too many
	if err == nil && try && t.queued && !over {
		err = ErrOccupied
	}
	if err == nil && !over && !fault.Planted(fault.SkipCheck) { // the plant SkipCheck: granted without waiting
		err = q.rule.wait(bctx, q, t.entry, en.reads)
	}
	// The one place that abandons an enqueued entry (an enqueue of unknown
	// outcome voids itself, in enqueue).
	if err != nil {
		if errors.Is(err, ErrEntryGone) && q.leaseGone(bctx, s) {
			err = &endedError{ErrLeaseGone}
		}
		return nil, cause(ctx, bctx, s, withCleanup(err, t, q.abandon(ctx, s, t, false)))
	}
	return newHold(q, t) // fails if the session ended just before the grant
}

// enqueued is the outcome of an enqueue: the entry's ticket and the rule's
// reads, at the entry's revision.
type enqueued struct {
	t     ticket
	reads []*pb.ResponseOp
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

// errBound is the cause of a context from bind that was cancelled because
// the session ended.
var errBound = errors.New("session ended")

// bind returns a copy of ctx that is also cancelled, with cause errBound,
// when s ends (its queue state's End). Call cancel when done.
func bind(ctx context.Context, s Session) (context.Context, context.CancelFunc) {
	bctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(stateOf(s).ctx, func() { cancel(errBound) })
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

// leaseGone reports whether s's lease is gone on the server: an entry that
// vanished while waiting was taken by a revoke of the lease (which the
// session has not noticed yet) rather than by hand. One request, on that
// rare path only.
func (q *Queue) leaseGone(ctx context.Context, s Session) bool {
	resp, err := retry.TimeToLive(ctx, q.cli, s.Lease())
	return err == nil && resp.TTL == -1
}

// withCleanup adds to err that removing t's key failed with cerr, if it
// did.
func withCleanup(err error, t ticket, cerr error) error {
	if cerr != nil {
		return fmt.Errorf("%w (and removing key %q failed: %v)", err, t.Key, cerr)
	}
	return err
}

// abandon removes t's key after a cancelled or failed acquire, with a
// context detached from ctx and bounded by cleanup.Timeout, and frees its
// name. If the delete fails, the key is kept as a leftover that the
// session's next enqueue deletes first. If s has ended, abandon does
// nothing: the key goes with the lease (whose heartbeats have stopped),
// and etcd may well be unreachable; so does a late enqueue.
//
// unknown says t's enqueue failed with an unknown outcome, so that it may
// still be applied (see "Late writes"): the same transaction then also
// moves the session's epoch for the queue, and if it fails the queue is
// marked dirty.
//
// The transaction is guarded (abandonTxn): a copy of it that lands after
// abandon returned, when the name may hold a later attempt's entry, is
// void.
func (q *Queue) abandon(ctx context.Context, s Session, t ticket, unknown bool) error {
	select {
	case <-s.Done():
		return nil
	default:
	}
	cctx, cancel := cleanup.Context(ctx)
	defer cancel()
	guard, ops, els := q.abandonTxn(t, unknown)
	resp, err := q.kv.Txn(cctx).If(guard).Then(ops...).Else(els...).Commit()
	if err != nil {
		if unknown {
			t.st.markDirty(q.prefix)
		}
		q.retire(t) // the next enqueue retries; the lease's end removes it anyway
		return err
	}
	if unknown {
		if !resp.Succeeded {
			// The epoch moved before this cleanup (another cleanup of the
			// session's on this queue): a late enqueue is void all the
			// same, but one that landed before the move left its key.
			// Retire the name; the next enqueue deletes the key.
			epoch, _ := t.st.epochOf(q.prefix)
			q.adoptEpoch(t.st, epoch, resp.Responses[0].GetResponseRange().Kvs)
			q.retire(t)
			return nil
		}
		t.st.setEpoch(q.prefix, resp.Header.Revision)
	}
	t.st.freeSlot(t.slot)
	return nil
}

// abandonTxn is abandon's transaction: the guard, the deletes (and, after
// an unknown outcome, the epoch's move), and what to do if the guard
// fails (delete the side keys of an entry already gone; read the epoch).
//
// The guard voids every copy of the transaction but the first that etcd
// applies. internal/retry sends it again when an attempt times out, and a
// slow copy (held by a member cut off from the leader) can land after
// abandon returned and the name went to the session's next attempt: an
// unguarded delete would then remove that attempt's entry, a live
// holder's key (the cluster fault harness found this under packet loss:
// docs/faults.md). A known entry's delete is guarded by its create
// revision; after an unknown outcome, by the session's epoch, which the
// first copy applied moves.
func (q *Queue) abandonTxn(t ticket, unknown bool) (clientv3.Cmp, []clientv3.Op, []clientv3.Op) {
	ops := q.deletes(t.Key)
	if !unknown {
		// If the entry is gone already (deleted by hand, its lease
		// revoked), its side keys, which have no lease, still go: each
		// guarded by the revision the enqueue put it at.
		var els []clientv3.Op
		for _, k := range q.rule.sideKeys(q, t.Key) {
			els = append(els, clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), "=", t.Rev)},
				[]clientv3.Op{clientv3.OpDelete(k)}, nil))
		}
		return t.Owned(), ops, els
	}
	ek := q.epochKey(t.st)
	epoch, _ := t.st.epochOf(q.prefix)
	ops = append(ops, clientv3.OpPut(ek, "", clientv3.WithLease(t.st.id)))
	return clientv3.Compare(clientv3.ModRevision(ek), "=", epoch), ops, []clientv3.Op{clientv3.OpGet(ek, clientv3.WithKeysOnly())}
}
