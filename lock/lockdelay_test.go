package lock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/lock"
)

// Lock-delay: a holder whose grant ends without Unlock (its lease revoked,
// as when its process dies and the lease expires) delays the next grant by
// d after its key's deletion; a clean Unlock does not (the control, in the
// same test). When nobody waited at the time, the next Lock, or TryLock,
// waits d from its arrival. A Mutex without the option leaves no mark.
func TestLockDelay(t *testing.T) {
	t.Parallel()
	const d = time.Second
	cli := etcdtest.New(t).Client(t)
	ctx := etcdtest.Context(t)
	newMutex := func(name string, opts ...lock.Option) (*lock.Mutex, func() error) {
		s := etcdtest.Session(t, cli, fastBeat)
		m, err := lock.New(s, name, opts...)
		require.NoError(t, err)
		return m, func() error { _, err := cli.Revoke(ctx, s.Lease()); return err }
	}
	delay := lock.WithLockDelay(d)
	// gap is the time from the holder's key's deletion, seen by a watch of
	// the test's own, to the queued waiter's grant.
	gap := func(name string, unclean bool, opts ...lock.Option) time.Duration {
		holder, kill := newMutex(name, opts...)
		h, err := holder.Lock(ctx)
		require.NoError(t, err)
		waiter, _ := newMutex(name, opts...)
		w := cli.Watch(ctx, holder.Prefix(), clientv3.WithPrefix(), clientv3.WithRev(int64(h.Token().Seq)+1))
		got := make(chan time.Time, 1)
		errc := make(chan error, 1)
		go func() {
			g, err := waiter.Lock(ctx)
			got <- time.Now()
			if err == nil {
				err = g.Unlock(ctx)
			}
			errc <- err
		}()
		etcdtest.WaitPuts(t, w, 1) // the waiter is queued
		if unclean {
			require.NoError(t, kill())
		} else {
			require.NoError(t, h.Unlock(ctx))
		}
		var deleted time.Time
		for deleted.IsZero() {
			wr := <-w
			require.NoError(t, wr.Err())
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete && string(ev.Kv.Key) == h.(*lock.Grant).Key() {
					deleted = time.Now()
				}
			}
		}
		granted := <-got
		require.NoError(t, <-errc)
		return granted.Sub(deleted)
	}

	clean := gap("delay", false, delay)
	unclean := gap("delay", true, delay)
	without := gap("plain", true)
	t.Logf("key deleted → next grant: clean Unlock %v; lease revoked %v (d = %v); revoked, without the option %v", clean, unclean, d, without)
	// The waiter starts its d when it sees the deletion, a moment after
	// this test's watch may: allow that moment.
	assert.GreaterOrEqual(t, unclean, d-50*time.Millisecond, "a grant that ended without Unlock must delay the next by d")
	assert.Less(t, clean, d/2, "a clean Unlock must not delay the next grant")
	assert.Less(t, without, d/2, "without the option, no delay")

	// Nobody waiting when the holder died: the next Lock waits d from its
	// arrival; TryLock too; after that the mark is gone.
	for _, try := range []bool{false, true} {
		holder, kill := newMutex("late", delay)
		h, err := holder.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, kill())
		<-h.Done()
		next, _ := newMutex("late", delay)
		start := time.Now()
		acquire := next.Lock
		if try {
			acquire = next.TryLock
		}
		g, err := acquire(ctx)
		require.NoError(t, err)
		waited := time.Since(start)
		t.Logf("try=%v: arriving after the unclean end, waited %v", try, waited)
		assert.GreaterOrEqual(t, waited, d, "try=%v", try)
		require.NoError(t, g.Unlock(ctx))
		start = time.Now()
		g, err = next.Lock(ctx)
		require.NoError(t, err)
		assert.Less(t, time.Since(start), d/2, "the mark was removed")
		require.NoError(t, g.Unlock(ctx))
	}
	assert.Zero(t, etcdtest.KeyCount(t, cli, "dlock/lock/late"), "no key or mark left")

	_, err := lock.New(etcdtest.Session(t, cli), "x", lock.WithLockDelay(-time.Second))
	assert.ErrorIs(t, err, lock.ErrInvalidOption)
	assert.ErrorContains(t, err, "lock delay")
}
