package queue

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/session"
)

// When an enqueue fails with an unknown outcome and its cleanup cannot
// reach etcd either, the queue is dirty: the session's next Join first
// moves the epoch, so that the failed enqueue, if it is still applied
// later, fails its compare; then it removes the leftover.
func TestDirtyQueueMovesEpochFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cli := etcdtest.New(t).Client(t)
	s, err := session.New(ctx, cli)
	require.NoError(t, err)
	defer s.Close(context.Background())
	q := Queue{Client: cli, Prefix: "dirty/"}

	// A closed client stands in for a partition: the enqueue and its
	// cleanup both fail.
	dead := etcdtest.NewClient(t, clientv3.Config{Endpoints: cli.Endpoints()})
	require.NoError(t, dead.Close())
	_, _, err = Queue{Client: dead, Prefix: q.Prefix}.Join(ctx, s, "lost")
	require.Error(t, err)
	p := poolFor(s)
	before, dirty := p.epoch(q.Prefix)
	require.True(t, dirty)

	a, pred, err := q.Join(ctx, s, "a")
	require.NoError(t, err)
	assert.Nil(t, pred)
	after, dirty := p.epoch(q.Prefix)
	assert.False(t, dirty)
	assert.Greater(t, after, before, "the epoch moved")

	// The lost enqueue arriving now: it compares the old epoch and fails.
	late := q.Prefix + p.lease + "99"
	resp, err := cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(late), "=", 0),
		clientv3.Compare(clientv3.ModRevision(q.epochKey(p)), "=", before),
	).Then(clientv3.OpPut(late, "lost", clientv3.WithLease(s.Lease()))).Commit()
	require.NoError(t, err)
	assert.False(t, resp.Succeeded, "a late enqueue with the old epoch must fail")
	_, err = q.Leave(ctx, a)
	require.NoError(t, err)
}
