package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/integration/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStartConfig(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := redistest.Start(t)
	c := s.Client(t)
	require.NoError(t, c.Ping(ctx).Err())
	for k, want := range map[string]string{"maxmemory-policy": "noeviction", "appendonly": "no", "save": ""} {
		got, err := c.ConfigGet(ctx, k).Result()
		require.NoError(t, err)
		assert.Equal(t, want, got[k], k)
	}
	s.Config("maxmemory-policy", "allkeys-lru")
	got, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
	require.NoError(t, err)
	assert.Equal(t, "allkeys-lru", got["maxmemory-policy"])
}

// TestKillRestart: Kill takes the server down; Restart brings it back empty
// on the same port.
func TestKillRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := redistest.Start(t)
	addr := s.Addr()
	c := s.Client(t)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	assert.True(t, s.Running())

	s.Kill()
	assert.False(t, s.Running())
	assert.Error(t, c.Ping(ctx).Err(), "PING to a killed server")

	s.Restart()
	assert.True(t, s.Running())
	assert.Equal(t, addr, s.Addr(), "same address after Restart")
	n, err := c.Exists(ctx, "k").Result()
	require.NoError(t, err, "the old client reconnects")
	assert.Zero(t, n, "restarted empty")

	s.Stop()
	assert.False(t, s.Running())
	s.Stop() // no-op when stopped
	s.Kill()
}

func TestStartN(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	servers := redistest.StartN(t, 5)
	seen := map[string]bool{}
	for i, c := range redistest.Clients(t, servers) {
		require.NoError(t, c.Ping(ctx).Err(), "server %d", i)
		seen[servers[i].Addr()] = true
	}
	assert.Len(t, seen, 5, "distinct addresses")
}

func TestArgs(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := redistest.Start(t, redistest.WithArgs("--databases", "3"))
	got, err := s.Client(t).ConfigGet(ctx, "databases").Result()
	require.NoError(t, err)
	assert.Equal(t, "3", got["databases"])
}
