package queue

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/session"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func setup(t *testing.T) (context.Context, *clientv3.Client, *session.Session, *Queue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	cli := etcdtest.New(t).Client(t)
	s, err := session.New(ctx, cli)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close(context.Background()) })
	return ctx, cli, s, New(cli, "q", "x", Exclusive)
}

// join enqueues an Exclusive entry and returns it with its predecessor.
func join(t *testing.T, ctx context.Context, q *Queue, s *session.Session, val string) (ticket, *mvccpb.KeyValue) {
	t.Helper()
	en, err := q.enqueue(ctx, s, val, false)
	require.NoError(t, err)
	return en.t, predecessor(en.reads)
}

// Sequential entries of one session reuse one key name, so a busy queue
// does not pile up tombstones in etcd's index; concurrent entries get
// distinct names; create revisions (the tokens) still strictly increase.
func TestKeyNamesReused(t *testing.T) {
	t.Parallel()
	ctx, _, s, q := setup(t)
	a, pred := join(t, ctx, q, s, "a")
	assert.Nil(t, pred)
	b, pred := join(t, ctx, q, s, "b")
	require.NotNil(t, pred)
	assert.Equal(t, a.Key, string(pred.Key))
	assert.NotEqual(t, a.Key, b.Key, "live entries have distinct names")

	deleted, err := q.leave(ctx, a)
	require.NoError(t, err)
	assert.True(t, deleted)
	c, _ := join(t, ctx, q, s, "c")
	assert.Equal(t, a.Key, c.Key, "a finished entry's name is reused")
	assert.Greater(t, c.Rev, b.Rev)

	// A stale Leave of a (same name as c) must not delete c.
	deleted, err = q.leave(ctx, a)
	require.NoError(t, err)
	assert.False(t, deleted)
	for _, tk := range []ticket{b, c} {
		deleted, err := q.leave(ctx, tk)
		require.NoError(t, err)
		assert.True(t, deleted)
	}
}

// A key under a free name of the session is the session's own stray (an
// enqueue applied late, or sent again by the client after it was
// applied): nobody waits on it, so the next enqueue removes it, guarded by its
// create revision, instead of queueing behind it until the lease ends.
func TestStrayKeyRemoved(t *testing.T) {
	t.Parallel()
	ctx, cli, s, q := setup(t)
	a, _ := join(t, ctx, q, s, "a")
	deleted, err := q.leave(ctx, a)
	require.NoError(t, err)
	require.True(t, deleted)
	// Recreate the freed name behind the queue's back.
	stray, err := cli.Put(ctx, a.Key, "stray", clientv3.WithLease(s.Lease()))
	require.NoError(t, err)
	b, pred := join(t, ctx, q, s, "b")
	assert.Equal(t, a.Key, b.Key, "the name is used again")
	assert.Nil(t, pred, "b is not queued behind the stray")
	assert.Greater(t, b.Rev, stray.Header.Revision)
	resp, err := cli.Get(ctx, q.prefix, clientv3.WithPrefix())
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	assert.Equal(t, "b", string(resp.Kvs[0].Value))
}

// A key whose cleanup failed does not keep its own session queued behind
// it: the session's next enqueue removes it first.
func TestLeftoverSwept(t *testing.T) {
	t.Parallel()
	ctx, cli, s, q := setup(t)
	a, _ := join(t, ctx, q, s, "a")
	// The cleanup cannot reach etcd: a closed client stands in for a
	// partition.
	dead := etcdtest.NewClient(t, clientv3.Config{Endpoints: cli.Endpoints()})
	require.NoError(t, dead.Close())
	broken := New(dead, "q", "x", Exclusive)
	require.Error(t, broken.abandon(ctx, s, a, false))

	b, pred := join(t, ctx, q, s, "b")
	assert.Nil(t, pred, "the leftover was removed before b joined")
	assert.NotEqual(t, a.Key, b.Key, "the leftover's name stays retired")
	resp, err := cli.Get(ctx, a.Key)
	require.NoError(t, err)
	assert.Empty(t, resp.Kvs)
}

// A copy of an abandon's transaction that etcd applies late (internal/retry
// sent it again after a timeout; the first copy was held by a member cut
// off from the leader) must not delete the entry of the session's next
// attempt, which reuses the name. The cluster fault harness found this
// under packet loss: a late copy deleted a live leader's key, and the next
// candidate was elected beside it.
func TestLateAbandonCopyIsVoid(t *testing.T) {
	t.Parallel()
	for _, unknown := range []bool{false, true} {
		t.Run(fmt.Sprintf("unknown=%v", unknown), func(t *testing.T) {
			ctx, cli, s, q := setup(t)
			a, _ := join(t, ctx, q, s, "a")
			guard, ops, els := q.abandonTxn(a, unknown) // what abandon sends
			require.NoError(t, q.abandon(ctx, s, a, unknown))
			b, _ := join(t, ctx, q, s, "b")
			require.Equal(t, a.Key, b.Key, "the next attempt reuses the name")

			// The late copy lands now.
			_, err := cli.Txn(ctx).If(guard).Then(ops...).Else(els...).Commit()
			require.NoError(t, err)

			resp, err := cli.Get(ctx, b.Key)
			require.NoError(t, err)
			require.Len(t, resp.Kvs, 1, "the late copy deleted the next attempt's entry")
			assert.Equal(t, b.Rev, resp.Kvs[0].CreateRevision)
		})
	}
}

// An abandon whose entry is gone already (deleted by hand, its lease
// revoked) still deletes the entry's side keys, which have no lease: a
// lock-delay shadow left behind would stand in the way of a later entry
// under the same name.
func TestAbandonGoneEntryDeletesSideKeys(t *testing.T) {
	t.Parallel()
	ctx, cli, s, _ := setup(t)
	q := New(cli, "q", "delayed", ExclusiveDelay(time.Second))
	a, _ := join(t, ctx, q, s, "a")
	side := q.rule.sideKeys(q, a.Key)
	require.Len(t, side, 1)
	_, err := cli.Delete(ctx, a.Key) // the entry goes behind the attempt's back
	require.NoError(t, err)

	require.NoError(t, q.abandon(ctx, s, a, false))
	resp, err := cli.Get(ctx, side[0])
	require.NoError(t, err)
	assert.Empty(t, resp.Kvs, "the lock-delay shadow was left behind")
}
