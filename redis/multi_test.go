package redis_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/redis"
)

// LockAll across backends: two goroutines take an etcd lock and a Redis
// lock together, in opposite argument orders, in a loop, and never
// deadlock (the global order sorts "etcd:..." before "redis:..."); each
// grant carries its own backend's token.
func TestLockAllEtcdAndRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cli := etcdtest.New(t).Client(t)
	ctx := etcdtest.ContextFor(t, 30*time.Second)
	newPair := func() (lock.Locker, *redis.Mutex) {
		e, err := lock.New(etcdtest.Session(t, cli), "mixed/a")
		require.NoError(t, err)
		r, err := redis.New(srv.Client(t), "mixed/b", redis.WithTTL(testTTL))
		require.NoError(t, err)
		drainAtEnd(t)
		return e, r
	}
	const rounds = 30
	var wg sync.WaitGroup
	for g := range 2 {
		e, r := newPair()
		ls, names := []lock.Locker{e, r}, []string{"mixed/a", "mixed/b"}
		if g == 1 {
			ls, names = []lock.Locker{r, e}, []string{"mixed/b", "mixed/a"}
		}
		wg.Go(func() {
			for range rounds {
				err := lock.DoAll(ctx, ls, func(ctx context.Context, hs []lock.Held) error {
					for i, h := range hs {
						assert.Equal(t, names[i], h.Token().Name, "grants in argument order")
						assert.NotZero(t, h.Token().Seq, "each grant has its backend's token")
					}
					return nil
				})
				if !assert.NoError(t, err, "DoAll of goroutine %d (a deadlock ends at the test's deadline, or, on Redis, with a lost grant at the TTL)", g) {
					return
				}
			}
		})
	}
	wg.Wait()
	assert.Zero(t, etcdtest.KeyCount(t, cli, lock.DefaultPrefix+"/mixed%2Fa/"), "etcd key left")
	n, err := srv.Client(t).Exists(ctx, redis.DefaultPrefix+"{mixed/b}").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "Redis lock key left")
}

// A LockAll that holds an etcd lock and waits for a Redis one releases the
// etcd lock when its ctx ends.
func TestLockAllCancelEtcdAndRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cli := etcdtest.New(t).Client(t)
	ctx := etcdtest.ContextFor(t, 30*time.Second)
	e, err := lock.New(etcdtest.Session(t, cli), "cancel/a")
	require.NoError(t, err)
	r, err := redis.New(srv.Client(t), "cancel/b", redis.WithTTL(testTTL), redis.WithAutoExtend(0))
	require.NoError(t, err)
	drainAtEnd(t)
	holder, err := r.Lock(ctx)
	require.NoError(t, err)

	lctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	hs, err := lock.LockAll(lctx, r, e)
	assert.Nil(t, hs)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "ls[0] ("+r.LockKey()+")", "the error names the Redis lock")
	assert.Zero(t, etcdtest.KeyCount(t, cli, e.Prefix()), "the etcd lock taken first was released")
	require.NoError(t, holder.Unlock(ctx))
}
