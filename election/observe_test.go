package election_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/election"
	"github.com/dlock-go/dlock/integration/etcdtest"
)

// An observer whose watch starts behind a compaction re-reads and delivers
// the final state.
func TestObserveAcrossCompaction(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	a := newElection(t, etcdtest.Session(t, cli), "compact")
	b := newElection(t, etcdtest.Session(t, cli), "compact")

	var reads atomic.Int32
	final := make(chan *election.Term, 1)
	// On the observer's first read, before its watch starts at rev+1:
	// change the election, then compact past rev+1.
	hook := func(rev int64) {
		if reads.Add(1) != 1 {
			return
		}
		ta, err := a.Campaign(ctx, "a")
		if !assert.NoError(t, err) {
			return
		}
		assert.NoError(t, ta.Proclaim(ctx, "a2"))
		assert.NoError(t, ta.Resign(ctx))
		tb, err := b.Campaign(ctx, "b")
		if !assert.NoError(t, err) {
			return
		}
		assert.NoError(t, tb.Proclaim(ctx, "final"))
		resp, err := cli.Get(ctx, "any")
		if !assert.NoError(t, err) {
			return
		}
		assert.Greater(t, resp.Header.Revision, rev+1)
		_, err = cli.Compact(ctx, resp.Header.Revision)
		assert.NoError(t, err)
		final <- tb
	}
	obs := newElection(t, etcdtest.Session(t, cli), "compact", election.WithReadHook(hook))
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := obs.Observe(octx)

	var tb *election.Term
	select {
	case tb = <-final:
	case <-ctx.Done():
		require.FailNow(t, "the hook did not finish")
	}
	want := election.Leader{Value: "final", Epoch: tb.Epoch()}
	got := receiveUntil(t, ctx, ch, want)
	assert.GreaterOrEqual(t, reads.Load(), int32(2), "the compacted watch must have been re-read")
	for _, l := range got[:len(got)-1] {
		assert.True(t, (l == election.Leader{}), "before the final state only the initial 'no leader' may show: %v", l)
	}
	l, err := obs.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, l)

	// Later changes still arrive after the re-read.
	require.NoError(t, tb.Resign(ctx))
	receiveUntil(t, ctx, ch, election.Leader{})
}

// A reader that does not read while the leader proclaims 20 values gets
// the latest one, never an older state after a newer one.
func TestObserveSlowReaderGetsLatest(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	el := newElection(t, etcdtest.Session(t, cli), "slow")
	ch := el.Observe(ctx)
	assert.Equal(t, election.Leader{}, receive(t, ctx, ch))

	term, err := el.Campaign(ctx, "v0")
	require.NoError(t, err)
	for i := 1; i <= 20; i++ {
		require.NoError(t, term.Proclaim(ctx, fmt.Sprintf("v%d", i)))
	}
	got := receiveUntil(t, ctx, ch, election.Leader{Value: "v20", Epoch: term.Epoch()})
	assert.LessOrEqual(t, len(got), 21)
	last := -1
	for _, l := range got {
		assert.Equal(t, term.Epoch(), l.Epoch)
		var n int
		_, err := fmt.Sscanf(l.Value, "v%d", &n)
		require.NoError(t, err)
		assert.Greater(t, n, last, "states arrive in order, without repeats")
		last = n
	}
	require.NoError(t, term.Resign(ctx))
}

// An observer started while a leader leads delivers it first; the channel
// closes when ctx ends.
func TestObserveStartsWithCurrentLeaderAndClosesWithCtx(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	el := newElection(t, etcdtest.Session(t, cli), "current")
	term, err := el.Campaign(ctx, "lead")
	require.NoError(t, err)

	octx, cancel := context.WithCancel(ctx)
	ch := newElection(t, etcdtest.Session(t, c.Client(t)), "current").Observe(octx)
	assert.Equal(t, election.Leader{Value: "lead", Epoch: term.Epoch()}, receive(t, ctx, ch))
	cancel()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				require.NoError(t, term.Resign(ctx))
				return
			}
		case <-ctx.Done():
			require.FailNow(t, "Observe channel not closed after ctx ended")
		}
	}
}

// An observer keeps going when the etcd leader changes under its watch.
func TestObserveSurvivesMemberLoss(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t, etcdtest.WithMembers(3))
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	el := newElection(t, etcdtest.Session(t, cli), "members")
	ch := el.Observe(ctx)
	assert.Equal(t, election.Leader{}, receive(t, ctx, ch))

	leader := c.Leader(t)
	leader.Stop(t)
	term, err := el.Campaign(ctx, "after-stop")
	require.NoError(t, err)
	receiveUntil(t, ctx, ch, election.Leader{Value: "after-stop", Epoch: term.Epoch()})
	leader.Restart(t)
	require.NoError(t, term.Proclaim(ctx, "after-restart"))
	receiveUntil(t, ctx, ch, election.Leader{Value: "after-restart", Epoch: term.Epoch()})
	require.NoError(t, term.Resign(ctx))
	receiveUntil(t, ctx, ch, election.Leader{})
}
