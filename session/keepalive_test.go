package session_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/session"
)

// leaseKeepAlive reads, from the member's metrics, how many LeaseKeepAlive
// streams it has opened and how many keepalive requests it has received.
func leaseKeepAlive(t *testing.T, ctx context.Context, m *etcdtest.Member) (streams, msgs float64) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.Endpoint()+"/metrics", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `grpc_method="LeaseKeepAlive"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(t, err, line)
		switch {
		case strings.HasPrefix(line, "grpc_server_started_total{"):
			streams += v
		case strings.HasPrefix(line, "grpc_server_msg_received_total{"):
			msgs += v
		}
	}
	require.NoError(t, sc.Err())
	return streams, msgs
}

// waitRenewals waits until s's deadline has moved n times.
func waitRenewals(t *testing.T, ctx context.Context, s *session.Session, n int) {
	t.Helper()
	last := s.Deadline()
	for moved := 0; moved < n; {
		select {
		case <-ctx.Done():
			t.Fatalf("the deadline moved %d times of %d", moved, n)
		case <-s.Done():
			t.Fatalf("session ended: %v", s.Err())
		case <-time.After(10 * time.Millisecond): // polling the deadline: no event exists for it
		}
		if d := s.Deadline(); d.After(last) {
			last, moved = d, moved+1
		}
	}
}

// The heartbeat keeps one keepalive stream open and sends one request per
// heartbeat on it: etcd sees one stream for many keepalives (etcd's
// KeepAliveOnce, which the heartbeat used before, opens a stream per call:
// streams == msgs; here at least 3 messages a stream). After the member is killed and restarted, the session opens a new
// stream and goes on renewing.
func TestKeepalivesShareOneStream(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	s, err := session.New(ctx, cli, session.WithTTL(5*time.Second), session.WithHeartbeat(100*time.Millisecond))
	require.NoError(t, err)
	defer s.Close(ctx)
	m := c.Members()[0]

	waitRenewals(t, ctx, s, 5)
	// At most one stream more than needed: an exchange slower than the
	// attempt's bound (a noisy machine) opens another.
	streams, msgs := leaseKeepAlive(t, ctx, m)
	assert.LessOrEqual(t, streams, 2.0, "keepalive streams opened")
	assert.GreaterOrEqual(t, msgs, 3*streams, "keepalives received on %v streams", streams)

	m.Kill(t)
	m.Restart(t)
	waitRenewals(t, ctx, s, 5)
	streams, msgs = leaseKeepAlive(t, ctx, m)
	assert.LessOrEqual(t, streams, 2.0, "keepalive streams opened since the restart")
	assert.GreaterOrEqual(t, msgs, 3*streams, "keepalives received since the restart on %v streams", streams)
}
