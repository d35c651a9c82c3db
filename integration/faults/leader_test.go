package faults_test

import (
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/integration/faults"
)

// Scenario 3. Eight workers contend on one lock through clients that know
// all three members; the raft leader is stopped mid-run and restarted.
// Exclusion holds (no two workers in their sections at once), tokens
// strictly increase in grant order, the workers make progress with the
// leader down and after it is back, and the mutex and register histories
// check with porcupine.
func TestLeaderKilledUnderContention(t *testing.T) {
	const (
		workers = 8
		phase   = 25 // grants per phase: before, during, after the fault
	)
	c := etcdtest.New(t, etcdtest.WithMembers(3))
	ctx := ctxFor(t)
	con := newContention(t, "leader-kill", 5*time.Second)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for id := range workers {
		cli := c.Client(t)
		wg.Go(func() { con.run(ctx, id, cli, stop, nil) })
	}
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	t.Cleanup(halt)

	require.NoError(t, con.waitGrants(ctx, phase))
	leader := c.Leader(t)
	leader.Stop(t)
	atStop := con.grants()
	t.Logf("stopped leader %s after %d grants", leader.Name(), atStop)
	require.NoError(t, con.waitGrants(ctx, atStop+phase), "progress with the leader down")
	leader.Restart(t)
	atRestart := con.grants()
	t.Logf("restarted %s after %d grants", leader.Name(), atRestart)
	require.NoError(t, con.waitGrants(ctx, atRestart+phase), "progress after the restart")
	halt()

	con.mu.Lock()
	tokens := append([]uint64(nil), con.tokens...)
	con.mu.Unlock()
	t.Logf("%d grants, %d lost, %d transient errors tolerated", len(tokens), con.lost.Load(), con.errs.Load())
	assert.Zero(t, con.overlaps.Load(), "two workers held the lock at once")
	assert.Equal(t, -1, strictlyIncreasing(tokens), "tokens must strictly increase in grant order: %v", tokens)
	assert.Greater(t, len(tokens)-atRestart, 0, "grants after the restart")

	res, path := faults.Check(t, faults.FencedMutex, con.mutexes.Ops())
	assert.Equal(t, porcupine.Ok, res, "mutex history; visualization: %s", path)
	res, path = faults.Check(t, faults.FencedRegister, con.res.hist.Ops())
	assert.Equal(t, porcupine.Ok, res, "register history; visualization: %s", path)
	assert.Zero(t, etcdtest.KeyCount(t, c.Client(t), "dlock/lock/leader-kill/"), "no keys left")
}
