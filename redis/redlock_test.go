package redis_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/redis"
)

// TestRedlockQuorum: with 2 of 5 nodes down a grant still excludes others;
// with 3 down no grant is given, and the error names the failed nodes.
func TestRedlockQuorum(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	servers := redistest.StartN(t, 5)
	newRedlock := func() *redis.Redlock {
		r, err := redis.NewRedlock(redistest.Clients(t, servers), "quorum", redis.WithTTL(5*time.Second))
		require.NoError(t, err)
		drainAtEnd(t)
		return r
	}
	a, b := newRedlock(), newRedlock()

	servers[0].Kill()
	servers[4].Kill()
	h, err := a.TryLock(ctx)
	require.NoError(t, err, "TryLock with 2 of 5 nodes down")
	_, err = b.TryLock(ctx)
	assert.ErrorIs(t, err, lock.ErrLocked, "second holder with 2 of 5 nodes down")
	assert.ErrorIs(t, err, redis.ErrNoQuorum)
	require.NoError(t, h.Unlock(ctx), "Unlock on the 3 live nodes")

	servers[2].Kill()
	_, err = a.TryLock(ctx)
	require.Error(t, err, "TryLock with 3 of 5 nodes down")
	assert.ErrorIs(t, err, redis.ErrNoQuorum)
	assert.NotErrorIs(t, err, lock.ErrLocked, "nobody holds it: the failure is the quorum, not contention")
	qc, ok := redis.QuorumOf(err)
	require.True(t, ok, "the error carries the counts")
	// The attempt is decided once three nodes failed: the live nodes may
	// or may not have answered by then.
	assert.LessOrEqual(t, qc.OK, 2)
	assert.Equal(t, 3, qc.Quorum)
	assert.Equal(t, 3, qc.Failed)
	for _, node := range []int{0, 2, 4} {
		assert.Contains(t, err.Error(), fmt.Sprintf("node %d (%s): ", node, servers[node].Addr()), "the error names the failed node")
	}

	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer wcancel()
	_, err = a.Lock(wctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "Lock keeps refusing until its ctx ends")

	// The two live nodes must hold nothing: failed attempts release (nodes
	// that answered after the decision, themselves).
	drain(t)
	for _, i := range []int{1, 3} {
		n, err := servers[i].Client(t).Exists(ctx, redis.DefaultPrefix+"{quorum}").Result()
		require.NoError(t, err)
		assert.Zero(t, n, "node %d keeps a key after failed attempts", i)
	}

	// Back to a majority: grants again.
	servers[2].Restart()
	h, err = a.TryLock(ctx)
	require.NoError(t, err, "TryLock after a node came back")
	assert.NoError(t, h.Unlock(ctx))
}

// TestRedlockCannotBeFenced: the token has Seq 0 and every guard rejects it.
func TestRedlockCannotBeFenced(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r, err := redis.NewRedlock(redistest.Clients(t, redistest.StartN(t, 3)), "nofence")
	require.NoError(t, err)
	h, err := r.Lock(ctx)
	require.NoError(t, err)
	defer func() { assert.NoError(t, h.Unlock(ctx)) }()
	assert.Equal(t, fence.Token{Name: "nofence"}, h.Token())
	err = fence.NewMemoryGuard().Admit(ctx, h.Token())
	assert.ErrorIs(t, err, fence.ErrNoToken)
}

// TestRedlockExtendOnMajority: Extend succeeds with 2 of 5 down, and reports
// loss when a majority no longer holds the grant.
func TestRedlockExtendOnMajority(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	servers := redistest.StartN(t, 5)
	clients := redistest.Clients(t, servers)
	r, err := redis.NewRedlock(clients, "extend", redis.WithTTL(5*time.Second))
	require.NoError(t, err)
	h, err := r.Lock(ctx)
	require.NoError(t, err)
	g := h.(*redis.Grant)

	servers[0].Kill()
	servers[1].Kill()
	before := g.Deadline()
	require.NoError(t, g.Extend(ctx), "Extend with 3 of 5 up")
	assert.True(t, g.Deadline().After(before), "Extend moves the deadline")

	// On 2 of 5 only, with 2 nodes unreachable: no majority to extend on,
	// but not certainly lost either; the old deadline stands.
	require.NoError(t, clients[2].Del(ctx, redis.DefaultPrefix+"{extend}").Err())
	err = g.Extend(ctx)
	assert.ErrorIs(t, err, redis.ErrNoQuorum, "Extend with the grant on 2 of 5, 2 unknown")
	assert.NotErrorIs(t, err, lock.ErrLockLost)
	assert.NoError(t, g.Err(), "the grant lives until its deadline")

	// Gone on all 3 reachable nodes: certainly lost.
	for _, c := range clients[3:] {
		require.NoError(t, c.Del(ctx, redis.DefaultPrefix+"{extend}").Err())
	}
	err = g.Extend(ctx)
	assert.ErrorIs(t, err, lock.ErrLockLost, "Extend with the grant gone from 3 of 5")
	assert.ErrorIs(t, err, redis.ErrNoQuorum)
	assert.True(t, errors.Is(g.Err(), lock.ErrLockLost))
	select {
	case <-g.Done():
	default:
		t.Error("Done open after Extend reported loss")
	}
	assert.ErrorIs(t, g.Unlock(ctx), lock.ErrLockLost)
}

// Clients with go-redis' default options (ContextTimeoutEnabled false) are
// accepted: a stalled node cannot hold a fan-out past the node timeout
// (TestRedlockStalledNode shows it).
func TestRedlockAcceptsDefaultClients(t *testing.T) {
	t.Parallel()
	var clients []goredis.UniversalClient
	for i := range 3 {
		clients = append(clients, goredis.NewClient(&goredis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", i+1)}))
	}
	t.Cleanup(func() {
		for _, c := range clients {
			c.Close()
		}
	})
	_, err := redis.NewRedlock(clients, "x")
	require.NoError(t, err)
}
