package queue

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// errNoProgress: every try of an enqueue lost a race (the epoch moved, a
// stray key of the session held the name).
var errNoProgress = errors.New("no progress")

// maxTries bounds the tries of one enqueue.
const maxTries = 8

// prepare moves the epoch if an earlier cleanup could not, then deletes
// leftover keys; it returns the epoch to compare with.
func (q *Queue) prepare(ctx context.Context, s Session, st *state) (int64, error) {
	epoch, dirty := st.epochOf(q.prefix)
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
// entry's ticket and the reads' responses, which Acquire judges. With try,
// the Txn also compares that the rule would grant the entry at once; if
// not, it creates nothing and returns ErrOccupied (a rule without such a
// compare creates the entry, and Acquire judges it by its reads).
//
// On error nothing is left behind: after an unknown outcome (the Txn
// failed but may still be applied, now or later) enqueue voids it first
// (abandon, which also moves the epoch: see "Late writes"), and Acquire
// may send the enqueue again under a fresh name. The enqueue's Txn is sent
// once.
func (q *Queue) enqueue(ctx context.Context, s Session, val string, try bool) (enqueued, error) {
	st := stateOf(s)
	slot, keyName := st.reserveName()
	t := ticket{entry: entry{Key: q.keyPrefix + keyName}, st: st, slot: slot}
	ek := q.epochKey(st)
	cmps := make([]clientv3.Cmp, 2, 3) // the key is free; the epoch (set in each try) unmoved
	cmps[0] = clientv3.Compare(clientv3.CreateRevision(t.Key), "=", 0)
	haveVacant := q.haveVacant
	if try && haveVacant {
		cmps = append(cmps, q.vacant)
	}
	joinReads := q.joinReads
	side := q.rule.sideKeys(q, t.Key)
	then := make([]clientv3.Op, 0, len(joinReads)+1+len(side))
	then = append(append(then, joinReads...), clientv3.OpPut(t.Key, q.rule.value(val), clientv3.WithLease(s.Lease())))
	for _, k := range side {
		then = append(then, clientv3.OpPut(k, ""))
	}
	for range maxTries {
		epoch, err := q.prepare(ctx, s, st)
		if err != nil {
			st.freeSlot(t.slot)
			return enqueued{}, err
		}
		cmps[1] = clientv3.Compare(clientv3.ModRevision(ek), "=", epoch)
		txn := q.cli.Txn(ctx).If(cmps...).Then(then...)
		if try && haveVacant {
			// Why the compare failed, in the same round trip: the
			// queue is taken unless the epoch moved or a stray key of
			// ours holds the name.
			txn = txn.Else(clientv3.OpGet(ek, clientv3.WithKeysOnly()), clientv3.OpGet(t.Key, clientv3.WithKeysOnly()))
		}
		resp, err := txn.Commit()
		if err != nil {
			if refused(err) { // not applied, now or later
				st.freeSlot(t.slot)
				return enqueued{}, err
			}
			return enqueued{}, withCleanup(err, t, q.abandon(ctx, s, t, true))
		}
		if resp.Succeeded {
			t.Rev = resp.Header.Revision
			return enqueued{t: t, reads: resp.Responses[:len(joinReads)]}, nil
		}
		if !(try && haveVacant) {
			// Rare: read why in a second request rather than carry an
			// Else branch in every enqueue.
			if resp, err = q.kv.Txn(ctx).Then(
				clientv3.OpGet(ek, clientv3.WithKeysOnly()),
				clientv3.OpGet(t.Key, clientv3.WithKeysOnly()),
			).Commit(); err != nil {
				st.freeSlot(t.slot)
				return enqueued{}, err
			}
		}
		moved := q.adoptEpoch(st, epoch, resp.Responses[0].GetResponseRange().Kvs)
		stray := resp.Responses[1].GetResponseRange().Kvs
		if try && haveVacant && !moved && len(stray) == 0 {
			st.freeSlot(t.slot) // the epoch held and the queue is taken
			return enqueued{}, ErrOccupied
		}
		if len(stray) > 0 {
			if err := q.removeStray(ctx, t, stray[0].CreateRevision); err != nil {
				return enqueued{}, err
			}
		}
	}
	st.freeSlot(t.slot)
	return enqueued{}, fmt.Errorf("enqueue: %d tries: %w", maxTries, errNoProgress)
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
