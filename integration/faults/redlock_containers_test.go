package faults_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/containers"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/redis"
)

// redisContainers starts n Redis servers in containers of the locally built
// image (see integration/containers). Paused containers are resumed at
// cleanup, before they are removed.
func redisContainers(t *testing.T, ctx context.Context, n int) []*containers.RedisContainer {
	t.Helper()
	servers := containers.StartRedis(t, n)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, s := range servers {
			// Fails harmlessly for a container that is not paused.
			_ = exec.CommandContext(cctx, "docker", "unpause", s.ID()).Run()
		}
	})
	return servers
}

// redlockClients returns one client per server that tries a dead or paused
// node once and gives up when the ctx ends. Without ContextTimeoutEnabled
// go-redis ignores the ctx deadline on the socket: a paused node (which
// still accepts connections) holds each Redlock call for ReadTimeout (3s)
// instead of the node timeout, and the grant's validity runs out.
func redlockClients(t *testing.T, servers []*containers.RedisContainer) []goredis.UniversalClient {
	t.Helper()
	clients := make([]goredis.UniversalClient, len(servers))
	for i, s := range servers {
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	return clients
}

// Scenario 9. Redlock on 5 Redis containers, nodes frozen by the container
// runtime (docker pause: the process stops, its socket still accepts).
// With 2 nodes paused a majority answers: A is granted, and B, with its own
// clients, is refused with ErrLocked. With a 3rd paused no majority
// answers: TryLock fails with ErrNoQuorum and grants nothing.
func TestRedlockContainersPause(t *testing.T) {
	const ttl = 10 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	servers := redisContainers(t, ctx, 5)

	docker(t, ctx, "pause", servers[0].ID())
	docker(t, ctx, "pause", servers[1].ID())
	ra, err := redis.NewRedlock(redlockClients(t, servers), "redlock-pause", redis.WithTTL(ttl))
	require.NoError(t, err)
	rb, err := redis.NewRedlock(redlockClients(t, servers), "redlock-pause", redis.WithTTL(ttl))
	require.NoError(t, err)

	a, err := ra.TryLock(ctx)
	require.NoError(t, err, "granted by nodes 2-4 with nodes 0-1 paused")
	_, err = rb.TryLock(ctx)
	assert.ErrorIs(t, err, redis.ErrLocked, "B refused while A holds")
	assert.ErrorIs(t, err, lock.ErrLocked)
	assert.False(t, isDone(a.Done()), "A still holds")
	require.NoError(t, a.Unlock(ctx), "released on a majority")

	docker(t, ctx, "pause", servers[2].ID())
	b, err := rb.TryLock(ctx)
	assert.ErrorIs(t, err, redis.ErrNoQuorum, "2 of 5 nodes answer: no majority")
	assert.NotErrorIs(t, err, redis.ErrLocked, "the lock was free")
	assert.Nil(t, b, "no grant")
	for _, i := range []int{3, 4} {
		c := goredis.NewClient(&goredis.Options{Addr: servers[i].Addr(), ContextTimeoutEnabled: true})
		n, err := c.Exists(ctx, "dlock:{redlock-pause}").Result()
		c.Close()
		require.NoError(t, err)
		assert.Zero(t, n, "node %d: the failed attempt released its partial grant", i)
	}
}
