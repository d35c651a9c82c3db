package faults_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

// partitionRuns is how many times scenario 2 repeats: the property must hold
// every run, not on average.
const partitionRuns = 4

// Scenario 2. A holder is cut off from etcd (its proxy blackholes all
// traffic) while a waiter on another client is queued behind it. At the
// moment the waiter's Lock returns, the partitioned holder's Held.Done is
// already closed: the holder stops acting before anyone else can start.
func TestPartitionedHolderDoneBeforeNextGrant(t *testing.T) {
	c := etcdtest.New(t)
	cli := c.Client(t)
	for run := range partitionRuns {
		t.Run(fmt.Sprintf("run%d", run), func(t *testing.T) {
			ctx := ctxFor(t)
			name := fmt.Sprintf("partition-%d", run)
			pcli, proxy := c.ProxiedClient(t)
			ps := etcdtest.Session(t, pcli, session.WithTTL(2*time.Second))
			t.Cleanup(proxy.Unblackhole) // runs before the session's Close
			held, err := newMutex(t, ps, name).Lock(ctx)
			require.NoError(t, err)
			held.Done() // start watching, as a real holder would

			wm := newMutex(t, etcdtest.Session(t, cli), name)
			w := cli.Watch(ctx, queuePrefix(wm), clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithRev(int64(held.Token().Seq)+1))
			type result struct {
				h           lock.Held
				err         error
				holderEnded bool
				at          time.Time
			}
			got := make(chan result, 1)
			go func() {
				h, err := wm.Lock(ctx)
				r := result{h: h, err: err, at: time.Now()}
				select {
				case <-held.Done():
					r.holderEnded = true
				default:
				}
				got <- r
			}()
			waitEvents(t, ctx, w, clientv3.EventTypePut, 1) // the waiter is queued

			cut := time.Now()
			proxy.Blackhole()
			r := <-got
			require.NoError(t, r.err)
			assert.True(t, r.holderEnded, "the partitioned holder's Done must be closed when the waiter is granted")
			assert.Greater(t, r.h.Token().Seq, held.Token().Seq)
			assert.ErrorIs(t, held.Err(), lock.ErrLockLost)
			assert.ErrorIs(t, ps.Err(), session.ErrExpired)
			t.Logf("holder cut off; next grant %v later", r.at.Sub(cut).Round(time.Millisecond))

			proxy.Unblackhole()
			// The first request after the partition may fail on the broken
			// connection (see TestUnlockAfterLossReportsLoss); retry it.
			err = unlockRetry(ctx, held)
			assert.True(t, errors.Is(err, lock.ErrLockLost), "a late Unlock reports the loss: %v", err)
			require.NoError(t, r.h.Unlock(ctx))
			assert.Zero(t, etcdtest.KeyCount(t, cli, queuePrefix(wm)))
		})
	}
}

// unlockRetry calls Unlock until it returns nil or an error other than a
// transport error, at most 5 times.
func unlockRetry(ctx context.Context, h lock.Held) error {
	var err error
	for range 5 {
		uctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = h.Unlock(uctx)
		cancel()
		if err == nil || errors.Is(err, lock.ErrLockLost) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// Found by scenario 2 (a regression test now). The design says Unlock
// returns ErrLockLost "if it was lost first". A grant whose loss was
// already known (Done closed, Err matching ErrLockLost) used to send the
// guarded delete first and, if that request failed (a partition, a broken
// connection, the ctx ending), return only the transport error, so the
// caller could not tell "lost" from "try again".
func TestUnlockAfterLossReportsLoss(t *testing.T) {
	c := etcdtest.New(t)
	ctx := ctxFor(t)
	pcli, proxy := c.ProxiedClient(t)
	ps := etcdtest.Session(t, pcli, session.WithTTL(2*time.Second))
	t.Cleanup(proxy.Unblackhole) // runs before the session's Close
	held, err := newMutex(t, ps, "unlock-after-loss").Lock(ctx)
	require.NoError(t, err)
	proxy.Blackhole()
	<-held.Done()
	require.ErrorIs(t, held.Err(), lock.ErrLockLost)

	uctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err = held.Unlock(uctx)
	assert.ErrorIs(t, err, lock.ErrLockLost, "Unlock of a grant known to be lost must report the loss (got %v)", err)
}
