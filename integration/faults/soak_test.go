package faults_test

import (
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/integration/faults"
)

// The soak: 16 clients contend on one lock of a 3-member cluster for
// DLOCK_SOAK_DURATION (default 2m) while random faults hit it: a member
// stopped and restarted (sometimes the leader), a client's proxy
// blackholed for up to 2 TTLs, or delayed. It reports operations, faults
// injected and anomalies found (overlapping holds, tokens out of order,
// porcupine violations), and fails on any anomaly. Run with DLOCK_SOAK=1.
func TestSoak(t *testing.T) {
	if os.Getenv("DLOCK_SOAK") == "" {
		t.Skip("set DLOCK_SOAK=1 to run the soak")
	}
	dur := 2 * time.Minute
	if v := os.Getenv("DLOCK_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "DLOCK_SOAK_DURATION")
		dur = d
	}
	const (
		clients = 16
		ttl     = 3 * time.Second
	)
	seed := uint64(time.Now().UnixNano())
	t.Logf("soak: %v, %d clients, seed %d", dur, clients, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	c := etcdtest.New(t, etcdtest.WithMembers(3))
	ctx := ctxFor(t)
	var cancel func()
	ctx, cancel = contextWithTimeout(ctx, dur+2*time.Minute)
	defer cancel()
	con := newContention(t, "soak", ttl)
	stop := make(chan struct{})
	var proxies []*etcdtest.Proxy
	var wg sync.WaitGroup
	for id := range clients {
		var cli *clientv3.Client
		if id%2 == 0 {
			cli = c.Client(t)
		} else {
			var p *etcdtest.Proxy
			cli, p = c.ProxiedClient(t, c.Members()[id/2%3])
			proxies = append(proxies, p)
		}
		wg.Go(func() { con.run(ctx, id, cli, stop, nil) })
	}

	faultCounts := map[string]int{}
	end := time.Now().Add(dur)
	pause := func(d time.Duration) bool {
		timer := time.NewTimer(d) // the fault's length, not a synchronisation
		defer timer.Stop()
		select {
		case <-timer.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for time.Now().Before(end) && pause(time.Duration(500+rng.IntN(1500))*time.Millisecond) {
		switch rng.IntN(4) {
		case 0:
			m := c.Leader(t)
			m.Stop(t)
			faultCounts["leader stop/restart"]++
			pause(time.Duration(rng.IntN(3000)) * time.Millisecond)
			m.Restart(t)
		case 1:
			m := c.Members()[rng.IntN(3)]
			m.Stop(t)
			faultCounts["member stop/restart"]++
			pause(time.Duration(rng.IntN(3000)) * time.Millisecond)
			m.Restart(t)
		case 2:
			p := proxies[rng.IntN(len(proxies))]
			p.Blackhole()
			faultCounts["client blackhole"]++
			pause(time.Duration(rng.IntN(int(2*ttl/time.Millisecond))) * time.Millisecond)
			p.Unblackhole()
		case 3:
			p := proxies[rng.IntN(len(proxies))]
			d := time.Duration(50+rng.IntN(500)) * time.Millisecond
			p.DelayTx(d, d/5)
			p.DelayRx(d, d/5)
			faultCounts["client delay"]++
			pause(time.Duration(rng.IntN(3000)) * time.Millisecond)
			p.UndelayTx()
			p.UndelayRx()
		}
	}
	close(stop)
	wg.Wait()

	con.mu.Lock()
	tokens := append([]uint64(nil), con.tokens...)
	con.mu.Unlock()
	total := 0
	for _, n := range faultCounts {
		total += n
	}
	mres, mpath := faults.Check(t, faults.FencedMutex, con.mutexes.Ops())
	rres, rpath := faults.Check(t, faults.FencedRegister, con.res.hist.Ops())
	anomalies := int(con.overlaps.Load())
	if strictlyIncreasing(tokens) != -1 {
		anomalies++
	}
	if mres != porcupine.Ok {
		anomalies++
	}
	if rres != porcupine.Ok {
		anomalies++
	}
	t.Logf("soak figures: %d grants, %d register ops, %d mutex ops, %d faults %v, %d grants lost, %d transient errors, %d anomalies (mutex check %s, register check %s)",
		len(tokens), con.res.hist.Len(), con.mutexes.Len(), total, faultCounts, con.lost.Load(), con.errs.Load(), anomalies, mres, rres)
	assert.Zero(t, con.overlaps.Load(), "overlapping holds")
	assert.Equal(t, -1, strictlyIncreasing(tokens), "tokens out of order")
	assert.Equal(t, porcupine.Ok, mres, "mutex history; visualization: %s", mpath)
	assert.Equal(t, porcupine.Ok, rres, "register history; visualization: %s", rpath)
	assert.Positive(t, len(tokens))
}
