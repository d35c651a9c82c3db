package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/integration/redistest"
)

// A Redlock Client's Close waits for the work its lockers left running:
// with node 2 stopped, Lock and Unlock decide on nodes 0 and 1, and node
// 2's SET, which the node will still run when it resumes, is followed by a
// delete that waits for the node. Close returns only after that delete,
// so node 2 keeps no key; a Close that closed the connections at once
// would leave the key until its TTL.
func TestRedlockCloseWaitsForStragglers(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	servers := redistest.StartN(t, 3)
	client, err := dlock.Open(ctx, dlock.Config{
		Backend: dlock.BackendRedlock, Endpoints: []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}, TTL: 10 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close(context.WithoutCancel(ctx)) })
	l, err := client.Locker("close/straggler")
	require.NoError(t, err)
	h, err := l.Lock(ctx) // warm the connections
	require.NoError(t, err)
	require.NoError(t, h.Unlock(ctx))

	servers[2].Pause()
	defer servers[2].Resume()
	h, err = l.Lock(ctx)
	require.NoError(t, err, "granted by nodes 0 and 1")
	require.NoError(t, h.Unlock(ctx), "released on nodes 0 and 1")

	closed := make(chan error, 1)
	go func() { closed <- client.Close(ctx) }()
	early := false
	select {
	case err := <-closed:
		early = true
		require.NoError(t, err)
	case <-time.After(time.Second): // the delete waits up to 5s (cleanup.Timeout)
	}
	servers[2].Resume()
	if !early {
		select {
		case err := <-closed:
			require.NoError(t, err)
		case <-ctx.Done():
			t.Fatal("Close did not return after node 2 resumed")
		}
	}
	assert.False(t, early, "Close returned while node 2's delete waited for the node")
	n, err := servers[2].Client(t).Exists(ctx, "dlock:{close/straggler}").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "node 2 ran the late SET, then the delete that Close waited for")
}
