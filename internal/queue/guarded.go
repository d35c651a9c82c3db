package queue

import (
	"context"

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
