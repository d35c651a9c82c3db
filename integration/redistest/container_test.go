package redistest_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/containers"
	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// buildImage builds (or reuses) the local Redis image, skipping the test
// (failing it under DLOCK_REQUIRE) without Docker. From then on a failure of
// the container mode fails the test instead of skipping it.
func buildImage(t *testing.T) {
	t.Helper()
	if ok, why := containers.DockerAvailable(); !ok {
		testenv.Missing(t, "docker", why)
	}
	ctx, cancel := context.WithTimeout(t.Context(), containers.BuildTimeout)
	defer cancel()
	image, err := containers.BuildRedis(ctx)
	require.NoError(t, err)
	require.Equal(t, redistest.Image, image, "BuildRedis tags the image redistest uses")
	t.Setenv("DLOCK_REQUIRE", "all")
}

// TestContainerFallback: without redis-server on PATH, Start runs the
// server in a container of the image; SET/GET work, Stop and Kill take it
// down, Restart brings it back empty on the same address.
func TestContainerFallback(t *testing.T) {
	buildImage(t)
	t.Setenv("PATH", t.TempDir()) // no redis-server, no docker CLI either
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	s := redistest.Start(t)
	require.True(t, s.Container(), "container mode without the binary")
	addr := s.Addr()
	c := s.Client(t)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	got, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
	for k, want := range map[string]string{"maxmemory-policy": "noeviction", "appendonly": "no", "save": ""} {
		cfg, err := c.ConfigGet(ctx, k).Result()
		require.NoError(t, err)
		assert.Equal(t, want, cfg[k], k)
	}
	assert.True(t, s.Running())

	s.Stop()
	assert.False(t, s.Running())
	assert.Error(t, c.Ping(ctx).Err(), "PING to a stopped server")
	s.Stop() // no-op when stopped

	s.Restart()
	assert.True(t, s.Running())
	assert.Equal(t, addr, s.Addr(), "same address after Restart")
	n, err := c.Exists(ctx, "k").Result()
	require.NoError(t, err, "the old client reconnects")
	assert.Zero(t, n, "restarted empty")
	require.NoError(t, c.Set(ctx, "k", "v2", 0).Err())

	s.Kill()
	assert.False(t, s.Running())
	assert.Error(t, c.Ping(ctx).Err(), "PING to a killed server")
	s.Kill() // no-op when killed
	s.Restart()
	got, err = c.Get(ctx, "k").Result()
	assert.ErrorIs(t, err, goredis.Nil, "restarted empty after Kill, got %q", got)
}

// TestWithContainer: WithContainer forces the container mode even with the
// binary on PATH; WithArgs reaches the server; StartN gives distinct
// addresses.
func TestWithContainer(t *testing.T) {
	buildImage(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	servers := redistest.StartN(t, 2, redistest.WithContainer(), redistest.WithArgs("--databases", "3"))
	require.NotEqual(t, servers[0].Addr(), servers[1].Addr(), "distinct addresses")
	for i, c := range redistest.Clients(t, servers) {
		assert.True(t, servers[i].Container(), "server %d", i)
		got, err := c.ConfigGet(ctx, "databases").Result()
		require.NoError(t, err, "server %d", i)
		assert.Equal(t, "3", got["databases"], "server %d", i)
	}
}
