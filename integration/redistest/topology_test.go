package redistest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/integration/tlstest"
)

// TestPauseResume: a paused server answers nothing (the command runs into
// its deadline) and answers again after Resume, with its data.
func TestPauseResume(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := redistest.Start(t)
	c := s.Client(t)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	s.Pause()
	pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := c.Get(pctx, "k").Err()
	pcancel()
	assert.Error(t, err, "a paused server does not answer")
	s.Resume()
	v, err := c.Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", v, "the data survives a pause")
	s.Resume() // no-op on a running server
}

// TestProxyBlackhole: traffic flows through the proxy, stops while it is
// blackholed, and flows again after.
func TestProxyBlackhole(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := redistest.Start(t)
	p := redistest.NewProxy(t, s.Addr())
	c := goredis.NewClient(&goredis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Ping(ctx).Err())
	p.Blackhole()
	bctx, bcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	assert.Error(t, c.Ping(bctx).Err(), "no reply through a blackholed proxy")
	bcancel()
	p.Unblackhole()
	require.NoError(t, c.Ping(ctx).Err(), "a fresh connection works again")
}

func TestTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := redistest.Start(t, redistest.WithTLS(tlstest.New(t)))
	require.NoError(t, s.Client(t).Ping(ctx).Err())
	plain := goredis.NewClient(&goredis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = plain.Close() })
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	defer pcancel()
	assert.Error(t, plain.Ping(pctx).Err(), "the server speaks only TLS")
}

func TestSentinel(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st := redistest.StartSentinel(t)
	assert.Len(t, st.Addrs(), redistest.SentinelCount)
	addr, err := st.MasterAddr(ctx)
	require.NoError(t, err)
	assert.Equal(t, st.Master.Addr(), addr)
	c := st.Client(t)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	n, err := st.Master.Client(t).(*goredis.Client).Wait(ctx, 1, 5*time.Second).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the replica acknowledges")

	st.Failover(t)
	addr, err = st.MasterAddr(ctx)
	require.NoError(t, err)
	assert.Equal(t, st.Replica.Addr(), addr, "the replica is the master now")
	v, err := st.Client(t).Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", v, "a fresh failover client reads from the new master")
}

func TestCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cl := redistest.StartCluster(t, 3)
	require.Len(t, cl.Addrs(), 3)
	c := cl.Client(t).(*goredis.ClusterClient)
	for i := range 30 {
		require.NoError(t, c.Set(ctx, fmt.Sprintf("k%d", i), i, 0).Err())
	}
	masters := map[string]bool{}
	require.NoError(t, c.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
		n, err := m.DBSize(ctx).Result()
		if err == nil && n > 0 {
			masters[m.Options().Addr] = true
		}
		return err
	}))
	assert.Len(t, masters, 3, "keys spread over the three masters")
}

func TestClusterSentinelTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	certs := tlstest.New(t)
	cl := redistest.StartCluster(t, 3, redistest.WithTLS(certs))
	require.NoError(t, cl.Client(t).Set(ctx, "k", "v", 0).Err())
	st := redistest.StartSentinel(t, redistest.WithTLS(certs))
	require.NoError(t, st.Client(t).Set(ctx, "k", "v", 0).Err())
}
