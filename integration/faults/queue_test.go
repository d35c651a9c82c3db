package faults_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

// Scenario 4. A waiter whose session expires while it is queued never gets
// the lock, even when its predecessor releases right after: the next live
// waiter behind it is granted instead.
//
//   - paused: the waiter is a child process, stopped with SIGSTOP while
//     queued until the server has expired its lease, then resumed after the
//     lock moved on: its Lock returns an error.
//   - partitioned: the waiter's client is cut off; its Lock returns
//     ErrSessionDone at its local deadline.
func TestExpiredWaiterNeverGranted(t *testing.T) {
	c := etcdtest.New(t)
	cli := c.Client(t)

	t.Run("paused", func(t *testing.T) {
		ctx := ctxFor(t)
		hm := newMutex(t, etcdtest.Session(t, cli), "expired-paused")
		h, err := hm.Lock(ctx)
		require.NoError(t, err)
		w := cli.Watch(ctx, queuePrefix(hm), clientv3.WithPrefix(), clientv3.WithRev(int64(h.Token().Seq)+1))

		ch := startChild(t, "-endpoints", strings.Join(c.Endpoints(), ","), "-name", "expired-paused", "-ttl", "2s")
		queued := waitEvents(t, ctx, w, clientv3.EventTypePut, 1)[0]
		ch.signal(t, syscall.SIGSTOP)
		gone := waitEvents(t, ctx, w, clientv3.EventTypeDelete, 1)[0]
		require.Equal(t, queued, gone, "the server expired the paused waiter's key")

		require.NoError(t, h.Unlock(ctx))
		next, err := newMutex(t, etcdtest.Session(t, cli), "expired-paused").Lock(ctx)
		require.NoError(t, err)
		ch.signal(t, syscall.SIGCONT)
		out := ch.line(t, ctx)
		assert.True(t, strings.HasPrefix(out, "ERR "), "the expired waiter must not be granted: %q", out)
		assert.Contains(t, out, "session done")
		assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, queuePrefix(hm)), "only the new holder's key remains")
		require.NoError(t, next.Unlock(ctx))
	})

	t.Run("partitioned", func(t *testing.T) {
		ctx := ctxFor(t)
		hm := newMutex(t, etcdtest.Session(t, cli), "expired-cut")
		h, err := hm.Lock(ctx)
		require.NoError(t, err)
		w := cli.Watch(ctx, queuePrefix(hm), clientv3.WithPrefix(), clientv3.WithRev(int64(h.Token().Seq)+1))

		pcli, proxy := c.ProxiedClient(t)
		ws := etcdtest.Session(t, pcli, session.WithTTL(2*time.Second))
		t.Cleanup(proxy.Unblackhole)
		wm := newMutex(t, ws, "expired-cut")
		errc := make(chan error, 1)
		go func() {
			g, err := wm.Lock(ctx)
			if err == nil {
				g.Unlock(context.WithoutCancel(ctx))
			}
			errc <- err
		}()
		queued := waitEvents(t, ctx, w, clientv3.EventTypePut, 1)[0]
		// A live waiter queued behind the doomed one.
		nextc := make(chan lock.Held, 1)
		nm := newMutex(t, etcdtest.Session(t, cli), "expired-cut")
		go func() {
			g, err := nm.Lock(ctx)
			assert.NoError(t, err)
			nextc <- g
		}()
		waitEvents(t, ctx, w, clientv3.EventTypePut, 1)

		proxy.Blackhole()
		err = <-errc
		require.ErrorIs(t, err, lock.ErrSessionDone, "the cut-off waiter's Lock fails at its local deadline")
		assert.ErrorIs(t, err, session.ErrExpired)
		gone := waitEvents(t, ctx, w, clientv3.EventTypeDelete, 1)[0]
		require.Equal(t, queued, gone, "the server expired the waiter's key")
		require.NoError(t, h.Unlock(ctx))
		next := <-nextc
		require.NotNil(t, next)
		assert.Greater(t, next.Token().Seq, h.Token().Seq)
		proxy.Unblackhole()
		require.NoError(t, next.Unlock(ctx))
		assert.Zero(t, etcdtest.KeyCount(t, cli, queuePrefix(hm)))
	})
}

// Scenario 5. Session-expiry storm: 50 sessions on one client, one holding
// the lock and 49 queued, interleaved with 10 live waiters on another
// client. The doomed client is cut off, so all 50 sessions expire together.
// The live waiters are granted one at a time, in the order they queued,
// with strictly increasing tokens; no doomed waiter is granted; no key and
// no lease of the doomed sessions is left behind.
func TestSessionExpiryStorm(t *testing.T) {
	const (
		doomed = 50
		live   = 10
		every  = 5 // a live waiter after every 5 doomed ones
		name   = "storm"
	)
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := ctxFor(t)
	pcli, proxy := c.ProxiedClient(t)

	var doomedSessions []*session.Session
	for range doomed {
		doomedSessions = append(doomedSessions, etcdtest.Session(t, pcli, session.WithTTL(2*time.Second)))
	}
	t.Cleanup(proxy.Unblackhole)
	first, err := newMutex(t, doomedSessions[0], name).Lock(ctx)
	require.NoError(t, err)
	first.Done()
	prefix := lock.DefaultPrefix + "/" + name + "/"
	w := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithRev(int64(first.Token().Seq)+1))

	var (
		wg          sync.WaitGroup
		holding     atomic.Int32
		overlaps    atomic.Int32
		mu          sync.Mutex
		liveQueued  []string // keys of live waiters, in queue order
		grantOrder  []string // keys of live waiters, in grant order
		grantTokens []uint64
		doomedErrs  = make(chan error, doomed)
	)
	enqueue := func(m *lock.Mutex, isLive bool) {
		wg.Go(func() {
			h, err := m.Lock(ctx)
			if !isLive {
				if err == nil {
					h.Unlock(context.WithoutCancel(ctx))
				}
				doomedErrs <- err
				return
			}
			if !assert.NoError(t, err) {
				return
			}
			if holding.Add(1) > 1 {
				overlaps.Add(1)
			}
			mu.Lock()
			grantOrder = append(grantOrder, h.(*lock.Grant).Key())
			grantTokens = append(grantTokens, h.Token().Seq)
			mu.Unlock()
			holding.Add(-1)
			assert.NoError(t, h.Unlock(ctx))
		})
		key := waitEvents(t, ctx, w, clientv3.EventTypePut, 1)[0]
		if isLive {
			liveQueued = append(liveQueued, key)
		}
	}
	d := 1
	for l := range live {
		for range every - 1 + min(l, 1) {
			if d < doomed {
				enqueue(newMutex(t, doomedSessions[d], name), false)
				d++
			}
		}
		enqueue(newMutex(t, etcdtest.Session(t, cli), name), true)
	}
	require.Equal(t, doomed, d, "every doomed session is queued")
	require.Len(t, liveQueued, live)
	var doomedLeases []clientv3.LeaseID
	for _, s := range doomedSessions {
		doomedLeases = append(doomedLeases, s.Lease())
	}

	start := time.Now()
	proxy.Blackhole()
	for range doomed - 1 {
		err := <-doomedErrs
		assert.ErrorIs(t, err, lock.ErrSessionDone, "a doomed waiter must not be granted")
	}
	<-first.Done()
	assert.ErrorIs(t, first.Err(), lock.ErrLockLost)
	wg.Wait()
	t.Logf("storm drained %v after the cut", time.Since(start).Round(time.Millisecond))

	assert.Zero(t, overlaps.Load(), "two live waiters held the lock at once")
	assert.Equal(t, liveQueued, grantOrder, "live waiters are granted in queue order")
	assert.True(t, slices.IsSorted(grantTokens), "tokens increase: %v", grantTokens)
	assert.Zero(t, etcdtest.KeyCount(t, cli, prefix), "no orphan keys")
	leases, err := cli.Leases(ctx)
	require.NoError(t, err)
	for _, l := range leases.Leases {
		assert.NotContains(t, doomedLeases, l.ID, "a doomed lease survived the storm")
	}
	proxy.Unblackhole()
}
