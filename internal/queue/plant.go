//go:build dlock_faults

package queue

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// removeHead is leave under the plant fault.UnguardedRelease: a release
// that takes its entry for the holder without checking, so deletes the
// queue's first entry (and its side keys), whatever it is, with no
// create-revision guard; then it frees t's name, as leave does. It
// reports whether it deleted a key.
func (q *Queue) removeHead(ctx context.Context, t ticket) (bool, error) {
	resp, err := q.kv.Get(ctx, q.keyPrefix, append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...)
	if err != nil {
		return false, err
	}
	deleted := false
	if len(resp.Kvs) > 0 {
		dr, err := q.kv.Txn(ctx).Then(q.deletes(string(resp.Kvs[0].Key))...).Commit()
		if err != nil {
			return false, err
		}
		deleted = dr.Responses[0].GetResponseDeleteRange().Deleted > 0
	}
	t.st.freeSlot(t.slot)
	return deleted, nil
}

// overgrant is the plant fault.TryOvergrant's count: a Shared rule's entry
// that found exactly its permits held before it takes itself for granted
// (one permit too many).
func (q *Queue) overgrant(t ticket) bool {
	r, ok := q.rule.(shared)
	return ok && t.ahead == int64(r.n)
}
