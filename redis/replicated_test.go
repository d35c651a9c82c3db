package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/redis"
)

// TestReplicasClients: WithReplicas (WAIT) runs on the clients it accepts,
// a failover client (a *goredis.Client) and a cluster client (WAIT on the
// key's master), and refuses the others.
func TestReplicasClients(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	st := redistest.StartSentinel(t)
	m := newMutex(t, st.Client(t), "wait", redis.WithReplicas(1, 5*time.Second))
	drainAtEnd(t)
	h, err := m.TryLock(ctx)
	require.NoError(t, err, "the sentinel setup's replica acknowledges")
	require.NoError(t, h.Unlock(ctx))

	cl := redistest.StartCluster(t, 3)
	m = newMutex(t, cl.Client(t), "wait", redis.WithReplicas(1, 50*time.Millisecond))
	drainAtEnd(t)
	_, err = m.TryLock(ctx)
	assert.ErrorIs(t, err, redis.ErrNotReplicated, "the cluster's masters have no replicas: WAIT ran and counted none")
	n, err := cl.Client(t).Exists(ctx, redis.DefaultPrefix+"{wait}").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the unacknowledged grant was released")

	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": st.Master.Addr()}})
	t.Cleanup(func() { _ = ring.Close() })
	_, err = redis.New(ring, "wait", redis.WithReplicas(1, 0))
	assert.ErrorIs(t, err, redis.ErrInvalidOption, "WAIT needs one connection to the key's master")
	assert.ErrorContains(t, err, "replicas")
}

// TestSentinelFailoverDoubleGrant shows why a Mutex says SurvivesFailover
// false: replication to the replica is cut (its link blackholed, so
// neither side notices), A is granted on the master, and a Sentinel
// failover promotes the replica, which never saw A's grant. B, on a
// failover client, is then granted the same lock while A's grant is still
// valid, and with the same token: the counter's last INCR was lost too.
func TestSentinelFailoverDoubleGrant(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st := redistest.StartSentinel(t)
	a := newMutex(t, st.Client(t), "failover", redis.WithTTL(30*time.Second))
	drainAtEnd(t)

	// A first grant that did replicate: the counter is on both nodes.
	h0, err := a.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, h0.Unlock(ctx))
	acks, err := st.Master.Client(t).(*goredis.Client).Wait(ctx, 1, 10*time.Second).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), acks, "the replica is in sync")

	st.Link.Blackhole()
	ha, err := a.Lock(ctx)
	require.NoError(t, err)
	require.Equal(t, h0.Token().Seq+1, ha.Token().Seq)

	st.Failover(t)
	b := newMutex(t, st.Client(t), "failover", redis.WithTTL(30*time.Second))
	drainAtEnd(t)
	hb, err := b.TryLock(ctx)
	require.NoError(t, err, "the promoted replica grants the lock again")
	select {
	case <-ha.Done():
		t.Fatal("A's grant ended before B's: no overlap shown")
	default:
	}
	assert.Equal(t, ha.Token(), hb.Token(), "the token was handed out twice")
	t.Logf("two holders after a Sentinel failover: A %v (old master), B %v (promoted replica)", ha.Token(), hb.Token())
	require.NoError(t, hb.Unlock(ctx))
	err = ha.Unlock(ctx)
	if err != nil {
		assert.ErrorIs(t, err, lock.ErrLockLost, "A's key is not on the new master")
	}
}
