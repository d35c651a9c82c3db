package queue

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/session"
)

// readPredecessor's serializable read is accepted only at a revision at or
// above the deletion it follows; a read below it (a lagging member) is
// repeated as a linearizable read. Here the deletion revision is beyond the
// store's, as a lagging member would see it: readPredecessor must make a
// second request and still answer correctly.
func TestReadPredecessorLinearizablyBelowTheDeletion(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c := etcdtest.New(t)
	var requests atomic.Int64
	cfg := c.Config()
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(
		func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			requests.Add(1)
			return invoker(ctx, method, req, reply, cc, opts...)
		})}
	cli := etcdtest.NewClient(t, cfg)
	s, err := session.New(ctx, cli)
	require.NoError(t, err)
	defer s.Close(context.Background())
	q := New(cli, "check", "x", Exclusive)

	a, _ := join(t, ctx, q, s, "a")
	b, pred := join(t, ctx, q, s, "b")
	require.Equal(t, a.Key, string(pred.Key))

	for _, tc := range []struct {
		name     string
		delRev   int64
		requests int64
	}{
		{"after an event, at or above it", b.Rev, 1},
		{"after an event, below it", b.Rev + 1000, 2},
		{"without an event", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := requests.Load()
			p, rev, err := q.readPredecessor(ctx, b.entry, tc.delRev)
			require.NoError(t, err)
			require.NotNil(t, p)
			assert.Equal(t, a.Key, string(p.Key), "b's predecessor")
			assert.GreaterOrEqual(t, rev, b.Rev)
			assert.Equal(t, tc.requests, requests.Load()-before, "requests")
		})
	}

	// a leaves: b is first. b leaves: readPredecessor reports it gone.
	_, err = q.leave(ctx, a)
	require.NoError(t, err)
	p, _, err := q.readPredecessor(ctx, b.entry, b.Rev)
	require.NoError(t, err)
	assert.Nil(t, p, "b is first")
	_, err = q.leave(ctx, b)
	require.NoError(t, err)
	_, _, err = q.readPredecessor(ctx, b.entry, b.Rev)
	assert.ErrorIs(t, err, ErrEntryGone)
}
