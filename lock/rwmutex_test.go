package lock_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

func newRWMutex(t *testing.T, s session.Source, name string) *lock.RWMutex {
	t.Helper()
	rw, err := lock.NewRWMutex(s, name)
	require.NoError(t, err)
	return rw
}

// A writer's release grants the run of readers queued behind it at once,
// and only them: the writer queued after the run, and the reader after
// that writer, issue no request. Each waiter watches only what can grant
// it.
func TestRWWriterReleaseGrantsReaderRun(t *testing.T) {
	t.Parallel()
	const run = 3
	c := etcdtest.New(t)
	rc := newRequestCounter()
	cfg := c.Config()
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(rc.intercept)}
	cli := etcdtest.NewClient(t, cfg)
	ctx := etcdtest.Context(t)

	w0, err := newRWMutex(t, etcdtest.Session(t, cli), "run").Lock(ctx)
	require.NoError(t, err)
	prefix := lock.RWPrefix(newRWMutex(t, etcdtest.Session(t, cli), "run"))
	w := etcdtest.WatchPuts(t, cli, prefix)

	type grant struct {
		id int
		h  lock.Held
	}
	granted := make(chan grant, run+2)
	var wg sync.WaitGroup
	queue := func(id int, acquire func(*lock.RWMutex, context.Context) (lock.Held, error)) {
		rw := newRWMutex(t, etcdtest.Session(t, cli), "run")
		wctx := context.WithValue(ctx, waiterID{}, id)
		wg.Go(func() {
			h, err := acquire(rw, wctx)
			if assert.NoError(t, err) {
				granted <- grant{id, h}
			}
		})
		etcdtest.WaitPuts(t, w, 1)
	}
	rlock := (*lock.RWMutex).RLock
	for i := range run {
		queue(i, rlock) // readers 0..2
	}
	queue(run, (*lock.RWMutex).Lock) // writer 3
	queue(run+1, rlock)              // reader 4, behind the writer

	require.NoError(t, w0.Unlock(ctx))
	var readers []lock.Held
	for range run {
		g := <-granted
		assert.Less(t, g.id, run, "only the readers before the writer")
		readers = append(readers, g.h)
		assert.Greater(t, g.h.Token().Seq, w0.Token().Seq)
	}
	now := rc.snapshot()
	for id := range run {
		assert.Contains(t, []int{2, 3}, now[id], "reader %d: enqueue and one check", id)
	}
	assert.Equal(t, 1, now[run], "the queued writer issued no request")
	assert.Equal(t, 1, now[run+1], "the reader behind it issued no request")

	for _, h := range readers {
		require.NoError(t, h.Unlock(ctx))
	}
	g := <-granted
	assert.Equal(t, run, g.id, "then the writer")
	for _, r := range readers {
		assert.Greater(t, g.h.Token().Seq, r.Token().Seq, "a writer's token exceeds the earlier readers'")
	}
	require.NoError(t, g.h.Unlock(ctx))
	g = <-granted
	assert.Equal(t, run+1, g.id, "then the last reader")
	require.NoError(t, g.h.Unlock(ctx))
	wg.Wait()
	assert.Zero(t, etcdtest.KeyCount(t, cli, prefix))
}

// Cancelled RLock and Lock leave no key; TryRLock and TryLock refused
// create none.
func TestRWCancelLeavesNoKey(t *testing.T) {
	t.Parallel()
	cli := etcdtest.New(t).Client(t)
	ctx := etcdtest.Context(t)
	rw := newRWMutex(t, etcdtest.Session(t, cli), "cancel")
	h, err := rw.Lock(ctx)
	require.NoError(t, err)
	w := etcdtest.WatchPuts(t, cli, lock.RWPrefix(rw))
	for _, acquire := range []func(*lock.RWMutex, context.Context) (lock.Held, error){(*lock.RWMutex).RLock, (*lock.RWMutex).Lock} {
		wctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		other := newRWMutex(t, etcdtest.Session(t, cli), "cancel")
		go func() { _, err := acquire(other, wctx); errc <- err }()
		etcdtest.WaitPuts(t, w, 1)
		cancel()
		require.ErrorIs(t, <-errc, context.Canceled)
		assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, lock.RWPrefix(rw)))
	}
	_, err = rw.TryRLock(ctx)
	assert.ErrorIs(t, err, lock.ErrLocked)
	_, err = rw.TryLock(ctx)
	assert.ErrorIs(t, err, lock.ErrLocked)
	assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, lock.RWPrefix(rw)))
	require.NoError(t, h.Unlock(ctx))
	assert.Zero(t, etcdtest.KeyCount(t, cli, lock.RWPrefix(rw)))

	// A Mutex of the name acts as one more writer.
	r, err := rw.RLock(ctx)
	require.NoError(t, err)
	_, err = newMutex(t, etcdtest.Session(t, cli), "cancel").TryLock(ctx)
	assert.ErrorIs(t, err, lock.ErrLocked, "a Mutex excludes the readers")
	require.NoError(t, r.Unlock(ctx))

	_, err = lock.NewRWMutex(nil, "x")
	assert.ErrorIs(t, err, lock.ErrInvalidOption)
	_, err = lock.NewRWMutex(etcdtest.Session(t, cli), "a//b")
	assert.ErrorIs(t, err, lock.ErrInvalidName)
}
