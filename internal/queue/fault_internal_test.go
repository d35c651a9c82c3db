//go:build dlock_faults

package queue

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/internal/fault"
	"github.com/dlock-go/dlock/internal/fault/faulttest"
)

// Under the plant skip-check a waiter takes itself for granted although
// the entry before it is held: two grants of one lock at once. Without the
// plant the same acquire waits (the control).
func TestFaultSkipCheck(t *testing.T) {
	cli := etcdtest.New(t).Client(t)
	for _, tc := range []struct {
		name          string
		first, second Rule
	}{
		{"mutex", Exclusive, Exclusive},
		{"semaphore of 1", Shared(1), Shared(1)},
		{"reader behind a writer", Exclusive, Reader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := etcdtest.Context(t)
			a, b := etcdtest.Session(t, cli), etcdtest.Session(t, cli)
			first, second := New(cli, "skip", tc.name, tc.first), New(cli, "skip", tc.name, tc.second)
			ha, err := first.Acquire(ctx, a, "a", false)
			require.NoError(t, err)

			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err = second.Acquire(wctx, b, "b", false)
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded, "the control waits")

			faulttest.Set(t, "", fault.SkipCheck)
			hb, err := second.Acquire(ctx, b, "b", false)
			require.NoError(t, err)
			assert.True(t, hb.Queued(), "b was enqueued behind a")
			assert.Greater(t, hb.Rev(), ha.Rev())
			assert.NoError(t, ha.Err(), "a still holds")
			assert.NoError(t, hb.Err(), "b holds too")
			assert.Equal(t, int64(2), etcdtest.KeyCount(t, cli, first.Prefix()), "both keys are live")
		})
	}
}

// Under the plant unguarded-release a release takes its entry for the
// holder without checking: when a's key is gone (its lease expired on the
// server, say, while a has not noticed yet) and b has been granted since,
// a's late Unlock deletes b's key, b goes on believing it holds, and c,
// behind b, is granted too. With the guard (the control), the late release
// finds its key gone and deletes nothing.
func TestFaultUnguardedRelease(t *testing.T) {
	cli := etcdtest.New(t).Client(t)
	// lateRelease has a granted, then its key deleted behind its back, then
	// b granted; a releases.
	lateRelease := func(t *testing.T, ctx context.Context, q *Queue) (hb *Hold, released error) {
		a, b := etcdtest.Session(t, cli), etcdtest.Session(t, cli)
		ha, err := q.Acquire(ctx, a, "a", false)
		require.NoError(t, err)
		_, err = cli.Delete(ctx, ha.Key())
		require.NoError(t, err)
		hb, err = q.Acquire(ctx, b, "b", false)
		require.NoError(t, err)
		require.NoError(t, ha.Err(), "a has not noticed")
		return hb, ha.Release(ctx)
	}
	exists := func(t *testing.T, ctx context.Context, key string) bool {
		resp, err := cli.Get(ctx, key, clientv3.WithCountOnly())
		require.NoError(t, err)
		return resp.Count == 1
	}

	t.Run("control", func(t *testing.T) {
		ctx := etcdtest.Context(t)
		hb, err := lateRelease(t, ctx, New(cli, "unguarded", "control", Exclusive))
		assert.ErrorIs(t, err, ErrEntryGone, "the late release finds its key gone")
		assert.True(t, exists(t, ctx, hb.Key()), "b's key survives")
	})

	t.Run("planted", func(t *testing.T) {
		faulttest.Set(t, "", fault.UnguardedRelease)
		ctx := etcdtest.Context(t)
		q := New(cli, "unguarded", "planted", Exclusive)
		c := etcdtest.Session(t, cli)
		hb, err := lateRelease(t, ctx, q)
		assert.NoError(t, err, "the late release reports success")
		assert.False(t, exists(t, ctx, hb.Key()), "a's release deleted b's key")
		hc, err := q.Acquire(ctx, c, "c", false)
		require.NoError(t, err, "c is granted")
		assert.NoError(t, hb.Err(), "while b still holds")
		assert.Greater(t, hc.Rev(), hb.Rev())
	})
}

// Under the plant try-overgrant a semaphore's TryAcquire that finds all
// its permits held is granted anyway: three holders of two permits. The
// control refuses it; a try that finds more than its permits held is
// refused even planted (one too many, not any number).
func TestFaultTryOvergrant(t *testing.T) {
	cli := etcdtest.New(t).Client(t)
	ctx := etcdtest.Context(t)
	q := New(cli, "overgrant", "sem", Shared(2))
	for _, v := range []string{"a", "b"} {
		_, err := q.Acquire(ctx, etcdtest.Session(t, cli), v, false)
		require.NoError(t, err)
	}
	_, err := q.Acquire(ctx, etcdtest.Session(t, cli), "c", true)
	require.ErrorIs(t, err, ErrOccupied, "the control refuses the third")
	assert.Equal(t, int64(2), etcdtest.KeyCount(t, cli, q.Prefix()), "and leaves no key")

	faulttest.Set(t, "", fault.TryOvergrant)
	hc, err := q.Acquire(ctx, etcdtest.Session(t, cli), "c", true)
	require.NoError(t, err, "planted, the third is granted")
	assert.NoError(t, hc.Err())
	assert.Equal(t, int64(2), hc.Ahead(), "with both permits held before it")
	_, err = q.Acquire(ctx, etcdtest.Session(t, cli), "d", true)
	require.ErrorIs(t, err, ErrOccupied, "a fourth is refused")
	assert.Equal(t, int64(3), etcdtest.KeyCount(t, cli, q.Prefix()))
}
