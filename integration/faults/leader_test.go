package faults_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/internal/queue"
)

// Scenario 3. Workers contend on a Mutex (8 of them), a 2-permit
// Semaphore, an RWMutex and an Election (4 each) of a 3-member cluster of
// etcd processes, through clients that know all three members, each
// critical section held for 1-30 ms. The raft leader is killed (SIGKILL:
// no hand-over of leadership, the followers must notice it is gone and
// elect) mid-run and restarted. Every kind makes progress with the leader
// dead and after it is back; no kind's exclusion check sees more live
// grants than it allows (Mutex and Election: one, Semaphore: two, RWMutex:
// a writer alone); exclusive tokens strictly increase in grant order; the
// FencedMutex and FencedRegister histories check with porcupine; every
// worker is granted; no key is left.
func TestLeaderKilledUnderContention(t *testing.T) {
	const phase = 15 // grants per kind per phase: before, during, after the fault
	seed := seedFor(t, "", "")
	c := etcdtest.New(t, etcdtest.WithMembers(3))
	ctx := ctxFor(t)
	clients := map[string][]*clientv3.Client{}
	for _, k := range allKinds {
		n := 4
		if k.name == mutexKind.name {
			n = 8
		}
		for range n {
			clients[k.name] = append(clients[k.name], c.Client(t))
		}
	}
	f := newFleet(t) // halted before the clients close
	for _, k := range allKinds {
		f.add(ctx, newContention(t, k, "leader-kill-"+k.name, 5*time.Second, seed), clients[k.name])
	}

	require.NoError(t, f.progress(ctx, phase, phaseBound, 0, nil), "progress before the fault")
	leader := c.Leader(t)
	pid := leader.PID()
	killed := time.Now()
	leader.Kill(t)
	t.Logf("killed leader %s (pid %d) with SIGKILL", leader.Name(), pid)
	require.NoError(t, f.progress(ctx, phase, phaseBound, 0, nil), "progress with the leader dead")
	t.Logf("%d grants of every kind %v after the kill", phase, time.Since(killed).Round(time.Millisecond))
	leader.Restart(t)
	t.Logf("restarted %s", leader.Name())
	require.NoError(t, f.progress(ctx, phase, phaseBound, 0, nil), "progress after the restart")
	f.halt()

	f.figures(t)
	assert.Empty(t, f.check(t))
	cli := c.Client(t)
	for _, con := range f.cons {
		assert.Zero(t, etcdtest.KeyCount(t, cli, queue.PrefixFor(con.kind.prefix, con.name)), "%s: no keys left", con.name)
	}
}
