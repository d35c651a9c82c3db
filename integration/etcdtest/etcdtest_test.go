package etcdtest_test

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/integration/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSingleMember(t *testing.T) {
	c := etcdtest.New(t)
	cli := c.Client(t)
	_, err := cli.Put(t.Context(), "k", "v")
	require.NoError(t, err)
	resp, err := cli.Get(t.Context(), "k")
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	assert.Equal(t, "v", string(resp.Kvs[0].Value))
}

func TestThreeMembersStopRestart(t *testing.T) {
	c := etcdtest.New(t, etcdtest.WithMembers(3))
	cli := c.Client(t)
	_, err := cli.Put(t.Context(), "k", "1")
	require.NoError(t, err)
	l := c.Leader(t)
	l.Stop(t)
	_, err = cli.Put(t.Context(), "k", "2") // the two others elect a new leader
	require.NoError(t, err)
	l.Restart(t)
	assert.NotNil(t, c.Leader(t))
	resp, err := cli.Get(t.Context(), "k")
	require.NoError(t, err)
	assert.Equal(t, "2", string(resp.Kvs[0].Value))
}

func TestProxyBlackhole(t *testing.T) {
	c := etcdtest.New(t)
	cli, p := c.ProxiedClient(t)
	_, err := cli.Put(t.Context(), "k", "1")
	require.NoError(t, err)
	p.Blackhole()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = cli.Put(ctx, "k", "2")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	p.Unblackhole()
	resp, err := c.Client(t).Get(t.Context(), "k")
	require.NoError(t, err)
	assert.Equal(t, "1", string(resp.Kvs[0].Value), "the blackholed put must not have reached etcd")
}

// A killed leader (no hand-over) is replaced; killed and paused members
// come back with their data.
func TestKillPauseRestart(t *testing.T) {
	c := etcdtest.New(t, etcdtest.WithMembers(3))
	cli := c.Client(t)
	_, err := cli.Put(t.Context(), "k", "1")
	require.NoError(t, err)
	l := c.Leader(t)
	l.Kill(t)
	assert.False(t, l.IsLeader())
	next := c.Leader(t)
	assert.NotSame(t, l, next, "a new leader among the others")
	next.Pause(t) // two of three down: no majority until one is back
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = cli.Put(ctx, "k", "2")
	require.Error(t, err, "no write without a majority")
	next.Cont(t)
	l.Restart(t)
	_, err = cli.Put(t.Context(), "k", "3")
	require.NoError(t, err)
	resp, err := cli.Get(t.Context(), "k")
	require.NoError(t, err)
	assert.Equal(t, "3", string(resp.Kvs[0].Value))
}

// Delay slows one direction; a blackholed direction drops its bytes.
func TestProxyDelay(t *testing.T) {
	c := etcdtest.New(t)
	cli, p := c.ProxiedClient(t)
	_, err := cli.Put(t.Context(), "k", "1")
	require.NoError(t, err)
	p.DelayRx(300*time.Millisecond, 0)
	start := time.Now()
	_, err = cli.Get(t.Context(), "k")
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "the answer came through the delay")
	p.UndelayRx()
}

// A member that is down keeps its ports: no other server takes them
// before Restart (another test picking a free port would make the restart
// fail with "address already in use"); a connection to them is refused, as
// to any server that is down.
func TestDownMemberKeepsItsPorts(t *testing.T) {
	c := etcdtest.New(t, etcdtest.WithMembers(3))
	m := c.Members()[1]
	m.Kill(t)
	_, err := net.Listen("tcp", m.HostPort())
	require.Error(t, err, "a killed member's client port is held")
	_, err = net.Dial("tcp", m.HostPort())
	assert.ErrorIs(t, err, syscall.ECONNREFUSED, "a down member refuses connections")
	m.Restart(t)
	cli := c.Client(t)
	_, err = cli.Put(t.Context(), "k", "v")
	require.NoError(t, err)
	st, err := cli.Status(t.Context(), m.Endpoint())
	require.NoError(t, err, "the restarted member answers on its own port")
	assert.NotZero(t, st.Header.MemberId)
}
