package queue

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/session"
)

// The heartbeat's check of watched holds is a read-only Txn; the lease's
// key listing (LeaseTimeToLive with keys, which the leader serves) runs at
// every listEvery-th heartbeat only, until an enqueue of the session has an
// unknown outcome, and at every heartbeat after. A hold whose key is
// deleted behind its back still ends at the next check.
func TestCheckListsKeysRarely(t *testing.T) {
	c := etcdtest.New(t)
	var listings, txns atomic.Int64
	cfg := c.Config()
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			switch method {
			case "/etcdserverpb.Lease/LeaseTimeToLive":
				listings.Add(1)
			case "/etcdserverpb.KV/Txn":
				txns.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})}
	cli := etcdtest.NewClient(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	s, err := session.New(ctx, cli, session.WithTTL(3*time.Second), session.WithHeartbeat(100*time.Millisecond))
	require.NoError(t, err)
	defer s.Close(context.Background())

	var holds []*Hold
	for i := range 20 {
		h, err := New(cli, fmt.Sprintf("cost/%d", i), "x", Exclusive).Acquire(ctx, s, "v", false)
		require.NoError(t, err)
		h.Done()
		holds = append(holds, h)
	}
	const beats = 3 * listEvery
	l0, t0 := listings.Load(), txns.Load()
	waitBeats(t, ctx, s, beats)
	assert.LessOrEqual(t, listings.Load()-l0, int64(beats/listEvery+2), "listings in %d heartbeats", beats)
	assert.GreaterOrEqual(t, txns.Load()-t0, int64(beats/2), "checks in %d heartbeats", beats)

	// Deleted behind its back, a watched hold ends at the next check.
	_, err = cli.Delete(ctx, holds[7].Key())
	require.NoError(t, err)
	select {
	case <-holds[7].Done():
		assert.ErrorIs(t, holds[7].Err(), ErrEntryGone)
	case <-ctx.Done():
		t.Fatal("the hold whose key was deleted did not end")
	}

	// After an unknown outcome: a listing at every heartbeat (the control:
	// the counter sees listings).
	stateOf(s).sawUnknown()
	l0 = listings.Load()
	waitBeats(t, ctx, s, beats)
	assert.GreaterOrEqual(t, listings.Load()-l0, int64(beats-2), "listings in %d heartbeats after an unknown outcome", beats)
	for i, h := range holds {
		if i != 7 {
			require.NoError(t, h.Release(ctx))
		}
	}
}

// waitBeats waits until s's deadline has moved n times.
func waitBeats(t *testing.T, ctx context.Context, s *session.Session, n int) {
	t.Helper()
	last := s.Deadline()
	for moved := 0; moved < n; {
		select {
		case <-ctx.Done():
			t.Fatalf("the deadline moved %d times of %d", moved, n)
		case <-time.After(10 * time.Millisecond): // polling the deadline: no event exists for it
		}
		if d := s.Deadline(); d.After(last) {
			last, moved = d, moved+1
		}
	}
}
