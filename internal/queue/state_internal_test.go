package queue

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/session"
)

// Two sessions with the same lease ID, on two clusters, keep separate queue
// state: when one ends, the other's late-write protection (a dirty epoch
// that its next enqueue must move first) is intact. Kept by lease ID, the
// first session's end would delete the second's state.
func TestSameLeaseIDOnTwoClustersKeepsSeparateState(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const id = 0x7e57_1d
	// Every lease this client grants gets the same ID.
	sameID := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if r, ok := req.(*pb.LeaseGrantRequest); ok {
			r.ID = id
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	var sessions []*session.Session
	var clients []*clientv3.Client
	for range 2 {
		cfg := etcdtest.New(t).Config()
		cfg.DialOptions = []grpc.DialOption{sameID}
		cli := etcdtest.NewClient(t, cfg)
		s, err := session.New(ctx, cli)
		require.NoError(t, err)
		defer s.Close(context.Background())
		sessions, clients = append(sessions, s), append(clients, cli)
	}
	a, b := sessions[0], sessions[1]
	require.Equal(t, a.Lease(), b.Lease(), "the two sessions share a lease ID")
	require.NotSame(t, stateOf(a), stateOf(b))

	// b's enqueue and its cleanup fail (a closed client stands in for a
	// partition): b's queue is dirty.
	dead := etcdtest.NewClient(t, clientv3.Config{Endpoints: clients[1].Endpoints()})
	require.NoError(t, dead.Close())
	// Its retries end with dctx; the cleanup is bounded on its own.
	dctx, dcancel := context.WithTimeout(ctx, time.Second)
	defer dcancel()
	q := New(clients[1], "same", "x", Exclusive)
	_, err := New(dead, "same", "x", Exclusive).Acquire(dctx, b, "lost", false)
	require.Error(t, err)
	_, dirty := stateOf(b).epochOf(q.prefix)
	require.True(t, dirty)

	// a works on its own queue of the same name and ends.
	qa := New(clients[0], "same", "x", Exclusive)
	ta, _ := join(t, ctx, qa, a, "a")
	_, err = qa.leave(ctx, ta)
	require.NoError(t, err)
	require.NoError(t, a.Close(ctx))

	// b still knows its queue is dirty: its next enqueue moves the epoch
	// first.
	before, dirty := stateOf(b).epochOf(q.prefix)
	assert.True(t, dirty, "a's end must not touch b's state")
	tb, _ := join(t, ctx, q, b, "b")
	after, dirty := stateOf(b).epochOf(q.prefix)
	assert.False(t, dirty)
	assert.Greater(t, after, before, "the epoch moved before b's enqueue")
	_, err = q.leave(ctx, tb)
	require.NoError(t, err)
}
