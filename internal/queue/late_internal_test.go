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
// reach etcd either, the queue is dirty: the session's next enqueue first
// moves the epoch, so that the failed enqueue, if it is still applied
// later, fails its compare; then it removes the leftover.
func TestDirtyQueueMovesEpochFirst(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cli := etcdtest.New(t).Client(t)
	s, err := session.New(ctx, cli)
	require.NoError(t, err)
	defer s.Close(context.Background())
	q := New(cli, "dirty", "x", Exclusive)

	// A closed client stands in for a partition: the enqueue and its
	// cleanup both fail.
	dead := etcdtest.NewClient(t, clientv3.Config{Endpoints: cli.Endpoints()})
	require.NoError(t, dead.Close())
	_, _, err = New(dead, "dirty", "x", Exclusive).enqueue(ctx, s, "lost", false)
	require.Error(t, err)
	p := stateOf(s)
	before, dirty := p.epoch(q.prefix)
	require.True(t, dirty)

	a, pred := join(t, ctx, q, s, "a")
	assert.Nil(t, pred)
	after, dirty := p.epoch(q.prefix)
	assert.False(t, dirty)
	assert.Greater(t, after, before, "the epoch moved")

	// The lost enqueue arriving now: it compares the old epoch and fails.
	late := q.prefix + p.lease + "-99"
	resp, err := cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(late), "=", 0),
		clientv3.Compare(clientv3.ModRevision(q.epochKey(p)), "=", before),
	).Then(clientv3.OpPut(late, "lost", clientv3.WithLease(s.Lease()))).Commit()
	require.NoError(t, err)
	assert.False(t, resp.Succeeded, "a late enqueue with the old epoch must fail")
	_, err = q.leave(ctx, a)
	require.NoError(t, err)
}
