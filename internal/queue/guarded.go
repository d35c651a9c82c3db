package queue

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Update sets e's value if e is still the same key (same create revision),
// keeping the key's lease: a guarded put that never writes a later entry's
// key and never detaches the key from its lease. It reports whether e
// existed (and was updated).
func (q Queue) Update(ctx context.Context, e Entry, val string) (bool, error) {
	resp, err := q.Client.Txn(ctx).If(e.Owned()).Then(
		clientv3.OpPut(e.Key, val, clientv3.WithIgnoreLease()),
	).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// Head reads, in one round trip, whether e still exists (same create
// revision) and the queue's first entry at that moment (nil if e is gone).
// rev is the revision of the read. After Wait returned, it confirms that e
// is the first entry and was not deleted meanwhile.
func (q Queue) Head(ctx context.Context, e Entry) (exists bool, first *mvccpb.KeyValue, rev int64, err error) {
	resp, err := q.Client.Txn(ctx).If(e.Owned()).Then(
		clientv3.OpGet(q.Prefix, append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...),
	).Commit()
	if err != nil {
		return false, nil, 0, err
	}
	if !resp.Succeeded {
		return false, nil, resp.Header.Revision, nil
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		first = kvs[0]
	}
	return true, first, resp.Header.Revision, nil
}
