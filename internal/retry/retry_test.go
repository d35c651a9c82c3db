package retry

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/grpc/metadata"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestTransient(t *testing.T) {
	for _, err := range []error{
		rpctypes.ErrNoLeader, rpctypes.ErrGRPCNoLeader, rpctypes.ErrLeaderChanged, rpctypes.ErrTimeout,
		rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrGRPCTimeoutDueToConnectionLost, rpctypes.ErrTooManyRequests,
		rpctypes.ErrStopped, errors.Join(errors.New("wrapped"), rpctypes.ErrNoLeader),
	} {
		assert.True(t, Transient(err), "%v", err)
	}
	for _, err := range []error{
		rpctypes.ErrLeaseNotFound, rpctypes.ErrPermissionDenied, rpctypes.ErrCompacted, rpctypes.ErrAuthFailed,
		context.Canceled, errors.New("other"),
	} {
		assert.False(t, Transient(err), "%v", err)
	}
}

// Do sends again after a transient error and after an attempt that ran out
// of its own time, keeps the caller's metadata, and stops at once on
// another error.
func TestDo(t *testing.T) {
	ctx := clientv3.WithRequireLeader(t.Context())
	calls := 0
	v, err := Do(ctx, func(ctx context.Context) (int, error) {
		calls++
		md, _ := metadata.FromOutgoingContext(ctx)
		require.NotEmpty(t, md.Get("hasleader"), "each attempt carries the caller's request for a leader")
		switch calls {
		case 1:
			return 0, rpctypes.ErrNoLeader
		case 2:
			<-ctx.Done() // a request lost with a dead leader: the attempt's own deadline ends it
			return 0, ctx.Err()
		}
		return 42, nil
	})
	require.NoError(t, err)
	assert.Equal(t, 42, v)
	assert.Equal(t, 3, calls)

	calls = 0
	_, err = Do(ctx, func(ctx context.Context) (int, error) { calls++; return 0, rpctypes.ErrPermissionDenied })
	assert.ErrorIs(t, err, rpctypes.ErrPermissionDenied)
	assert.Equal(t, 1, calls, "no retry of a permanent error")
}

// When the caller's ctx ends, Do returns at once with an error matching
// ctx.Err() (and the last attempt's error).
func TestDoCtxEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := Do(ctx, func(ctx context.Context) (int, error) { return 0, rpctypes.ErrNoLeader })
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, rpctypes.ErrNoLeader)
	ctx, cancel = context.WithCancel(t.Context())
	cancel()
	_, err = Do(ctx, func(ctx context.Context) (int, error) { return 0, ctx.Err() })
	assert.ErrorIs(t, err, context.Canceled)
}
