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
	t.Parallel()
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
	// Its retries end with dctx; the cleanup is bounded on its own.
	dctx, dcancel := context.WithTimeout(ctx, time.Second)
	defer dcancel()
	_, err = New(dead, "dirty", "x", Exclusive).Acquire(dctx, s, "lost", false)
	require.Error(t, err)
	p := stateOf(s)
	before, dirty := p.epochOf(q.prefix)
	require.True(t, dirty)

	a, pred := join(t, ctx, q, s, "a")
	assert.Nil(t, pred)
	after, dirty := p.epochOf(q.prefix)
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

// An enqueue applied twice, the second copy after its attempt's Release
// (etcd's client sent it again after a timeout; the first copy, held by a
// paused member, lands late): the copy passes the name and epoch compares
// and leaves a key of the live session that nobody waits on. The model
// (model/queue.pml with -DNO_SWEEP) shows the stall that follows; here the
// heartbeat's check removes the stray, and a waiter behind it is granted
// (without the check it would wait until the session ends: the model's
// control).
func TestStrayCopyRemovedAtHeartbeat(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cli := etcdtest.New(t).Client(t)
	s, err := session.New(ctx, cli, session.WithTTL(4*time.Second), session.WithHeartbeat(300*time.Millisecond))
	require.NoError(t, err)
	defer s.Close(context.Background())
	other, err := session.New(ctx, cli)
	require.NoError(t, err)
	defer other.Close(context.Background())
	q := New(cli, "stray", "x", Exclusive)

	h, err := q.Acquire(ctx, s, "a", false)
	require.NoError(t, err)
	key, epoch := h.t.Key, stateOf(s).epochs[q.prefix].rev
	require.NoError(t, h.Release(ctx))

	// The late copy: the same Txn as the enqueue's.
	resp, err := cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
		clientv3.Compare(clientv3.ModRevision(q.epochKey(stateOf(s))), "=", epoch),
	).Then(clientv3.OpPut(key, "a", clientv3.WithLease(s.Lease()))).Commit()
	require.NoError(t, err)
	require.True(t, resp.Succeeded, "the copy passes every compare of the enqueue")

	// A waiter of another session queues behind the stray...
	got := make(chan error, 1)
	go func() {
		h, err := q.Acquire(ctx, other, "b", false)
		if err == nil {
			err = h.Release(ctx)
		}
		got <- err
	}()
	// ...and is granted once a heartbeat's check deleted it.
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the waiter behind the stray was never granted")
	}
	n, err := cli.Get(ctx, key, clientv3.WithCountOnly())
	require.NoError(t, err)
	assert.Zero(t, n.Count, "the stray is gone")
}

// The check deletes only keys under names no attempt holds: a held key and
// a waiting key of the session survive any number of heartbeats.
func TestStraySweepSparesLiveKeys(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cli := etcdtest.New(t).Client(t)
	s, err := session.New(ctx, cli)
	require.NoError(t, err)
	defer s.Close(context.Background())
	q := New(cli, "spare", "x", Exclusive)
	held, err := q.Acquire(ctx, s, "a", false)
	require.NoError(t, err)
	waiting, _ := join(t, ctx, q, s, "b")
	st := stateOf(s)
	resp, err := cli.TimeToLive(ctx, s.Lease(), clientv3.WithAttachedKeys())
	require.NoError(t, err)
	for range 3 {
		st.Heartbeat(ctx)
	}
	for _, k := range []string{held.t.Key, waiting.Key} {
		n, err := cli.Get(ctx, k, clientv3.WithCountOnly())
		require.NoError(t, err)
		assert.Equal(t, int64(1), n.Count, "%s survives the check", k)
	}
	assert.Len(t, resp.Keys, 2)
	_, err = q.leave(ctx, waiting)
	require.NoError(t, err)
	require.NoError(t, held.Release(ctx))
}
