package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/integration/etcdtest"
)

// Soak settings.
const (
	soakDefault = 2 * time.Minute
	soakTTL     = 3 * time.Second
	soakPerKind = 8 // clients per kind; the odd ones through a fault proxy
	// healBound is how soon after a fault is healed every kind, and every
	// client the fault hit, must have been granted again. It is one
	// acquire's bound and 2 TTLs more, not just the TTLs, because of a
	// stall the soak found: a blackhole can drop the frames of a waiter's
	// watch while its session's keepalives get through afterwards; the
	// waiter, first in the queue, is then never told that its predecessor
	// is gone, and holds up everyone behind it until its own attempt's ctx
	// ends (lockAttempt). Progress slower than healBound/3 is logged with
	// every worker's step and the queue in etcd.
	healBound = lockAttempt + 2*soakTTL
	// soakSlack is what the soak may take beyond its duration: the fault
	// in progress, its heal check, the workers' last rounds.
	soakSlack = 2 * time.Minute
)

// The soak: clients contend on a Mutex, a 2-permit Semaphore, an RWMutex
// and an Election (soakPerKind each, every critical section held for
// 1-30 ms) of a 3-member cluster of etcd processes for the soak's duration,
// while faults hit it one at a time: the leader killed (SIGKILL) and
// restarted, a member killed and restarted, a client's proxy blackholed
// for up to 2 TTLs, or delayed. After each fault is healed every kind, and
// every client the fault hit, must be granted again within healBound. At
// the end every kind's checks must hold (exclusion: one live Mutex holder
// or leader, two Semaphore permits, an RWMutex writer alone; exclusive
// tokens strictly increasing; porcupine), every client must have been
// granted, and the soak must have run for its whole duration.
//
// DLOCK_SOAK=1 runs it for 2m, DLOCK_SOAK=<duration> (or
// DLOCK_SOAK_DURATION) for that long. Every random draw (the faults, their
// order, targets and lengths, the holds, readers or writers) derives from
// DLOCK_SEED, or from the clock when it is unset; the soak logs seed=N
// and the command that replays the schedule, at the start and on failure.
func TestSoak(t *testing.T) {
	dur := soakDuration(t)
	seed := seedFor(t, "DLOCK_SOAK="+dur.String(), fmt.Sprintf("-v -timeout %v", dur+soakSlack+5*time.Minute))
	if dl, ok := t.Deadline(); ok && time.Until(dl) < dur+soakSlack {
		t.Fatalf("the soak needs %v and the test deadline is %v away: run go test with -timeout %v", dur+soakSlack, time.Until(dl).Round(time.Second), dur+soakSlack+5*time.Minute)
	}
	t.Logf("soak: %v, %d kinds x %d clients, ttl %v", dur, len(allKinds), soakPerKind, soakTTL)
	rng := rand.New(rand.NewPCG(seed, 0)) // the fault schedule's stream; the workers have their own

	c := etcdtest.New(t, etcdtest.WithMembers(3))
	// Not ctxFor: its 90 s would end the soak early.
	ctx := etcdtest.ContextFor(t, dur+soakSlack)
	var proxies []*etcdtest.Proxy
	type owner struct {
		kind   string
		id     int // the worker's
		member int // the member the proxy leads to
	}
	var owners []owner // per proxy
	clients := map[string][]*clientv3.Client{}
	for _, k := range allKinds {
		for id := range soakPerKind {
			if id%2 == 0 {
				clients[k.name] = append(clients[k.name], c.Client(t))
				continue
			}
			cli, p := c.ProxiedClient(t, c.Members()[id/2%3])
			clients[k.name] = append(clients[k.name], cli)
			proxies = append(proxies, p)
			owners = append(owners, owner{k.name, id, id / 2 % 3})
		}
	}
	fl := newFleet(t) // halted before the clients close
	cons := map[string]*contention{}
	for _, k := range allKinds {
		cons[k.name] = newContention(t, k, "soak-"+k.name, soakTTL, seed)
		fl.add(ctx, cons[k.name], clients[k.name])
	}
	// recovered waits until each client a fault hit (the proxy's, or those
	// whose proxy leads to the killed member) has been granted once more
	// than base (its count at the heal), within healBound of the heal.
	recovered := func(hit []owner, base []int, healed time.Time) error {
		var errs []error
		rctx, cancel := context.WithDeadline(ctx, healed.Add(healBound))
		defer cancel()
		for i, o := range hit {
			errs = append(errs, cons[o.kind].waitWorkerGrants(rctx, o.id, base[i]+1, healBound))
		}
		return errors.Join(errs...)
	}

	wait := func(d time.Duration) bool {
		timer := time.NewTimer(d) // a fault's length or gap, not a synchronisation
		defer timer.Stop()
		select {
		case <-timer.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	start := time.Now()
	counts := map[string]int{}
	var slowest, slowestHit time.Duration
	for n := 1; ; n++ {
		f := nextFault(rng, n, len(proxies))
		if !wait(f.gap) || time.Since(start) >= dur {
			break
		}
		at := time.Since(start)
		var note string
		var hit []owner // the clients the fault cuts off or slows
		switch f.what {
		case faultKillLeader, faultKillMember:
			m := c.Members()[f.member]
			if f.what == faultKillLeader {
				m = c.Leader(t)
			}
			note = fmt.Sprintf("%s, leader %v", m.Name(), m.IsLeader())
			for _, o := range owners {
				if c.Members()[o.member] == m {
					hit = append(hit, o)
				}
			}
			m.Kill(t)
			wait(f.length)
			m.Restart(t)
		case faultBlackhole:
			hit = append(hit, owners[f.proxy])
			proxies[f.proxy].Blackhole()
			wait(f.length)
			proxies[f.proxy].Unblackhole()
		case faultDelay:
			hit = append(hit, owners[f.proxy])
			p := proxies[f.proxy]
			p.DelayTx(f.delay, f.delay/5)
			p.DelayRx(f.delay, f.delay/5)
			wait(f.length)
			p.UndelayTx()
			p.UndelayRx()
		}
		counts[faultNames[f.what]]++
		healed := time.Now()
		base := make([]int, len(hit))
		for i, o := range hit {
			base[i] = cons[o.kind].workerGrants(o.id)
		}
		err := fl.progress(ctx, 1, healBound, healBound/3, t.Logf)
		after := time.Since(healed)
		rerr := recovered(hit, base, healed)
		back := time.Since(healed)
		slowest, slowestHit = max(slowest, after), max(slowestHit, back)
		// Left of "|" is the schedule, the same for the same seed.
		t.Logf("%v | at +%v (%s); every kind granted %v after the heal, the %d clients it hit %v after", f, at.Round(time.Millisecond), note, after.Round(time.Millisecond), len(hit), back.Round(time.Millisecond))
		if rerr != nil {
			t.Errorf("%v: a client the fault hit was not granted within %v of the heal: %v", f, healBound, rerr)
			break
		}
		if err != nil {
			t.Errorf("%v: not every kind granted within %v of the heal: %v", f, healBound, err)
			break
		}
	}
	ran := time.Since(start)
	fl.halt()

	fl.figures(t)
	total := 0
	for _, n := range counts {
		total += n
	}
	t.Logf("soak figures: ran %v, %d faults %v; slowest after a heal: a grant of every kind %v, of every client it hit %v (bound %v)",
		ran.Round(time.Millisecond), total, counts, slowest.Round(time.Millisecond), slowestHit.Round(time.Millisecond), healBound)
	if !t.Failed() {
		assert.GreaterOrEqual(t, ran, dur, "the soak ran for its whole duration")
	}
	assert.Empty(t, fl.check(t), "anomalies")
	for _, con := range fl.cons {
		if con.kind.name == semaphoreKind.name || con.kind.name == rwmutexKind.name {
			maxLive, _ := con.excl.figures()
			assert.GreaterOrEqual(t, maxLive, 2, "%s: grants were held together at some point (the check had something to check)", con.name)
		}
	}
}

// soakDuration returns the soak's duration, skipping t when DLOCK_SOAK is
// unset.
func soakDuration(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("DLOCK_SOAK")
	if v == "" {
		t.Skip("set DLOCK_SOAK=1 (or a duration, DLOCK_SOAK=10m) to run the soak")
	}
	dur := soakDefault
	if d, err := time.ParseDuration(v); err == nil {
		dur = d
	} else if on, err := strconv.ParseBool(v); err != nil || !on {
		t.Fatalf("DLOCK_SOAK=%q: want 1 or a duration", v)
	}
	if v := os.Getenv("DLOCK_SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "DLOCK_SOAK_DURATION")
		dur = d
	}
	require.Positive(t, dur, "the soak's duration")
	return dur
}

// The soak's faults.
const (
	faultKillLeader = iota // SIGKILL the raft leader, restart it after length
	faultKillMember        // SIGKILL member, restart it after length
	faultBlackhole         // blackhole proxy for length
	faultDelay             // delay proxy's traffic by delay ± delay/5 for length
	numFaults
)

var faultNames = [numFaults]string{"leader kill", "member kill", "client blackhole", "client delay"}

// fault is one fault of the schedule.
type fault struct {
	n      int
	gap    time.Duration // before it
	what   int
	member int // faultKillMember's member
	proxy  int // faultBlackhole's and faultDelay's proxy
	length time.Duration
	delay  time.Duration
}

// nextFault draws fault n from rng: always the same draws, so the
// schedule depends on the seed only.
func nextFault(rng *rand.Rand, n, proxies int) fault {
	f := fault{
		n:      n,
		gap:    500*time.Millisecond + time.Duration(rng.Int64N(int64(1500*time.Millisecond))),
		what:   rng.IntN(numFaults),
		member: rng.IntN(3),
		proxy:  rng.IntN(proxies),
		length: time.Duration(rng.Int64N(int64(3 * time.Second))),
		delay:  50*time.Millisecond + time.Duration(rng.Int64N(int64(500*time.Millisecond))),
	}
	if hole := time.Duration(rng.Int64N(int64(2 * soakTTL))); f.what == faultBlackhole {
		f.length = hole // up to 2 TTLs: the cut-off client's sessions expire
	}
	return f
}

func (f fault) String() string {
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	var what string
	switch f.what {
	case faultKillLeader:
		what = "kill the leader"
	case faultKillMember:
		what = fmt.Sprintf("kill member m%d", f.member)
	case faultBlackhole:
		what = fmt.Sprintf("blackhole proxy %d", f.proxy)
	case faultDelay:
		what = fmt.Sprintf("delay proxy %d by %v", f.proxy, ms(f.delay))
	}
	return fmt.Sprintf("fault %d after %v: %s for %v", f.n, ms(f.gap), what, ms(f.length))
}
