package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"

	"github.com/dlock-go/dlock/internal/cleanup"
	"github.com/dlock-go/dlock/internal/fault"
)

// ticket is a session's claim on one key name of a queue, from enqueue
// until leave or abandon.
type ticket struct {
	entry
	st     *state
	slot   uint64
	queued bool  // an entry preceded it at its enqueue: it had to wait
	ahead  int64 // entries before it at its enqueue, where the enqueue reads that (a semaphore); else -1
}

// errNoProgress: every try of an enqueue lost a race (the epoch moved, a
// stray key of the session held the name).
var errNoProgress = errors.New("no progress")

// maxTries bounds the tries of one enqueue.
const maxTries = 8

func (q *Queue) ticket(st *state) ticket {
	slot, name := st.name()
	return ticket{entry: entry{Key: q.keys + name}, st: st, slot: slot}
}

// epochKey is the session's epoch key for q (see "Late writes" in doc.go):
// beside the queue's prefix, never inside any queue's (names never contain
// "%").
func (q *Queue) epochKey(st *state) string {
	return strings.TrimSuffix(q.prefix, "/") + "%epoch/" + st.lease
}

// prepare moves the epoch if an earlier cleanup could not, then deletes
// leftover keys; it returns the epoch to compare with.
func (q *Queue) prepare(ctx context.Context, s Session, st *state) (int64, error) {
	epoch, dirty := st.epoch(q.prefix)
	if dirty {
		resp, err := q.kv.Put(ctx, q.epochKey(st), "", clientv3.WithLease(s.Lease()))
		if err != nil {
			return 0, fmt.Errorf("moving the epoch: %w", err)
		}
		epoch = st.setEpoch(q.prefix, resp.Header.Revision)
	}
	return epoch, st.sweep(ctx, q.kv)
}

// enqueue creates an entry holding val at the end of the queue, bound to
// s's lease, in one round trip: one Txn that compares that the key name is
// free and the session's epoch unmoved, then runs the rule's reads (the
// entry's predecessor, the queue's length) and the put. It returns the
// reads' responses. With try, the Txn also compares that the rule would
// grant the entry at once; if not, it creates nothing and returns
// ErrOccupied (for a rule without such a compare the entry is created,
// judged by its reads, and removed again).
//
// On error nothing is left behind: the key is removed with a detached,
// bounded context, and an enqueue applied later is void (see "Late
// writes"). The enqueue's Txn is sent once: Acquire sends a failed enqueue
// again (internal/retry), under a fresh name.
func (q *Queue) enqueue(ctx context.Context, s Session, val string, try bool) (ticket, []*pb.ResponseOp, error) {
	st := stateOf(s)
	t := q.ticket(st)
	t.ahead = -1
	ek := q.epochKey(st)
	cmps := make([]clientv3.Cmp, 2, 3) // the key is free; the epoch (set in each try) unmoved
	cmps[0] = clientv3.Compare(clientv3.CreateRevision(t.Key), "=", 0)
	haveFree := q.haveFree
	if try && haveFree {
		cmps = append(cmps, q.free)
	}
	reads := q.reads
	side := q.rule.sideKeys(q, t.Key)
	then := make([]clientv3.Op, 0, len(reads)+1+len(side))
	then = append(append(then, reads...), clientv3.OpPut(t.Key, q.rule.value(val), clientv3.WithLease(s.Lease())))
	for _, k := range side {
		then = append(then, clientv3.OpPut(k, ""))
	}
	for range maxTries {
		epoch, err := q.prepare(ctx, s, st)
		if err != nil {
			st.release(t.slot)
			return ticket{}, nil, err
		}
		cmps[1] = clientv3.Compare(clientv3.ModRevision(ek), "=", epoch)
		txn := q.cli.Txn(ctx).If(cmps...).Then(then...)
		if try && haveFree {
			// Why the compare failed, in the same round trip: the
			// queue is taken unless the epoch moved or a stray key of
			// ours holds the name.
			txn = txn.Else(clientv3.OpGet(ek, clientv3.WithKeysOnly()), clientv3.OpGet(t.Key, clientv3.WithKeysOnly()))
		}
		resp, err := txn.Commit()
		if err != nil {
			if refused(err) { // not applied, now or later
				st.release(t.slot)
				return ticket{}, nil, err
			}
			return ticket{}, nil, withCleanup(err, t, q.abandon(ctx, s, t, true))
		}
		if resp.Succeeded {
			t.Rev = resp.Header.Revision
			got := resp.Responses[:len(reads)]
			t.queued = !q.rule.grantedAtJoin(t.entry, got)
			if _, ok := q.rule.(shared); ok {
				t.ahead = before(got)
			}
			if err := q.rule.admit(got); err != nil {
				return ticket{}, nil, withCleanup(err, t, q.abandon(ctx, s, t, false))
			}
			if try && !haveFree && !q.rule.grantedAtJoin(t.entry, got) {
				return ticket{}, nil, withCleanup(ErrOccupied, t, q.abandon(ctx, s, t, false))
			}
			return t, got, nil
		}
		if !(try && haveFree) {
			// Rare: read why in a second request rather than carry an
			// Else branch in every enqueue.
			if resp, err = q.kv.Txn(ctx).Then(
				clientv3.OpGet(ek, clientv3.WithKeysOnly()),
				clientv3.OpGet(t.Key, clientv3.WithKeysOnly()),
			).Commit(); err != nil {
				st.release(t.slot)
				return ticket{}, nil, err
			}
		}
		moved := q.adoptEpoch(st, epoch, resp.Responses[0].GetResponseRange().Kvs)
		stray := resp.Responses[1].GetResponseRange().Kvs
		if try && haveFree && !moved && len(stray) == 0 {
			st.release(t.slot) // the epoch held and the queue is taken
			return ticket{}, nil, ErrOccupied
		}
		if len(stray) > 0 {
			if err := q.removeStray(ctx, t, stray[0].CreateRevision); err != nil {
				return ticket{}, nil, err
			}
		}
	}
	st.release(t.slot)
	return ticket{}, nil, fmt.Errorf("enqueue: %d tries: %w", maxTries, errNoProgress)
}

// refused reports whether etcd refused a request, so that it was not
// applied and never will be (unlike a timeout, whose outcome is unknown):
// permission denied, bad arguments, auth, or a member without a leader
// (which refuses at once a request that asks for one).
func refused(err error) bool {
	if errors.Is(err, rpctypes.ErrNoLeader) {
		return true
	}
	var ee rpctypes.EtcdError
	if !errors.As(err, &ee) {
		return false
	}
	switch ee.Code() {
	case codes.PermissionDenied, codes.InvalidArgument, codes.Unauthenticated, codes.FailedPrecondition, codes.OutOfRange:
		return true
	}
	return false
}

// removeStray deletes a key under t's name, created at rev: the session's
// own, left by a write that was applied late or sent again by etcd's
// client (nobody else uses the name), guarded by its create revision. The
// caller tries again.
func (q *Queue) removeStray(ctx context.Context, t ticket, rev int64) error {
	if _, err := q.remove(ctx, entry{Key: t.Key, Rev: rev}); err != nil {
		q.retire(t)
		return fmt.Errorf("removing stray key %q: %w", t.Key, err)
	}
	return nil
}

// adoptEpoch records the epoch key as read (kvs), if it moved from epoch;
// it reports whether it had.
func (q *Queue) adoptEpoch(st *state, epoch int64, kvs []*mvccpb.KeyValue) bool {
	rev := int64(0)
	if len(kvs) > 0 {
		rev = kvs[0].ModRevision
	}
	if rev == epoch {
		return false
	}
	st.setEpoch(q.prefix, rev)
	return true
}

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
			epoch, _ := t.st.epoch(q.prefix)
			q.adoptEpoch(t.st, epoch, resp.Responses[0].GetResponseRange().Kvs)
			q.retire(t)
			return nil
		}
		t.st.setEpoch(q.prefix, resp.Header.Revision)
	}
	t.st.release(t.slot)
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
	epoch, _ := t.st.epoch(q.prefix)
	ops = append(ops, clientv3.OpPut(ek, "", clientv3.WithLease(t.st.id)))
	return clientv3.Compare(clientv3.ModRevision(ek), "=", epoch), ops, []clientv3.Op{clientv3.OpGet(ek, clientv3.WithKeysOnly())}
}

// leave deletes t's entry if it is still the same key (a delete guarded by
// its create revision, which never removes a later entry) and frees its
// name. It reports whether it deleted the entry; false means it was gone.
func (q *Queue) leave(ctx context.Context, t ticket) (bool, error) {
	if fault.Planted(fault.UnguardedRelease) {
		return q.removeHead(ctx, t) // the plant (plant.go): the queue's first entry instead
	}
	deleted, err := q.remove(ctx, t.entry)
	if err != nil {
		return false, err
	}
	t.st.release(t.slot)
	return deleted, nil
}

// deletes are the deletes of the entry whose key is key and of its side
// keys.
func (q *Queue) deletes(key string) []clientv3.Op {
	ops := []clientv3.Op{clientv3.OpDelete(key)}
	for _, k := range q.rule.sideKeys(q, key) {
		ops = append(ops, clientv3.OpDelete(k))
	}
	return ops
}

// retire records t's key and side keys as leftovers (see state.retire).
func (q *Queue) retire(t ticket) {
	t.st.idle(t.slot)
	t.st.retire(t.Key)
	for _, k := range q.rule.sideKeys(q, t.Key) {
		t.st.retire(k)
	}
}

// remove deletes e (and its side keys) if it is still the same key (same
// create revision). It reports whether a key was deleted.
func (q *Queue) remove(ctx context.Context, e entry) (bool, error) {
	resp, err := q.kv.Txn(ctx).If(e.Owned()).Then(q.deletes(e.Key)...).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}
