package dlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/integration/etcdtest"
)

// rideBound is how long after a new leader is elected an operation started
// during the election may still take: one lost attempt of a request sent
// to the dead leader (internal/retry's first attempt deadline, 1s), a
// backoff, and slack for a loaded machine.
const rideBound = 2500 * time.Millisecond

// On a real 3-process cluster with fsync on, the leader SIGKILLed (no
// hand-over): Open, Lock through a Client opened before, and Campaign,
// each started during the election, all succeed once a leader exists,
// each by the election + rideBound. Before requests asked for a leader and
// were sent again after an attempt's deadline, each of them failed after
// its deadline (Open: "grant lease: context deadline exceeded", blaming
// the dead member's address).
func TestRidesOutLeaderElection(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t, etcdtest.WithMembers(3), etcdtest.WithFsync(), etcdtest.WithElection(100*time.Millisecond, time.Second))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cfg := dlock.Config{Backend: dlock.BackendEtcd, Endpoints: c.HostPorts(), Prefix: "ride"}
	existing, err := dlock.Open(ctx, cfg)
	require.NoError(t, err)
	defer existing.Close(ctx)
	el, err := existing.Election("ride")
	require.NoError(t, err)

	leader := c.Leader(t)
	killed := time.Now()
	leader.Kill(t)
	elected := make(chan time.Duration, 1)
	go func() { c.Leader(t); elected <- time.Since(killed) }()

	type result struct {
		what        string
		start, took time.Duration
		err         error
	}
	results := make(chan result, 16)
	var wg sync.WaitGroup
	do := func(what string, f func(ctx context.Context) error) {
		wg.Go(func() {
			start := time.Since(killed)
			// Each within the default dial timeout, as a user's Open is.
			octx, cancel := context.WithTimeout(ctx, dlock.DefaultDialTimeout)
			defer cancel()
			err := f(octx)
			results <- result{what, start, time.Since(killed) - start, err}
		})
	}
	for i := range 3 {
		do(fmt.Sprintf("open %d", i), func(ctx context.Context) error {
			client, err := dlock.Open(ctx, cfg)
			if err == nil {
				client.Close(ctx)
			}
			return err
		})
		do(fmt.Sprintf("lock %d", i), func(ctx context.Context) error {
			l, err := existing.Locker(fmt.Sprintf("l%d", i))
			require.NoError(t, err)
			h, err := l.Lock(ctx)
			if err == nil {
				err = h.Unlock(ctx)
			}
			return err
		})
		if i == 0 {
			do("campaign", func(ctx context.Context) error {
				term, err := el.Campaign(ctx, "me")
				if err == nil {
					err = term.Resign(ctx)
				}
				return err
			})
		}
		time.Sleep(400 * time.Millisecond) // spread the starts over the election: a schedule, not a synchronisation
	}
	wg.Wait()
	close(results)
	election := <-elected
	t.Logf("new leader %v after the kill", election.Round(time.Millisecond))
	for r := range results {
		t.Logf("%s: started %v after the kill, took %v: %v", r.what, r.start.Round(time.Millisecond), r.took.Round(time.Millisecond), r.err)
		if assert.NoError(t, r.err, r.what) {
			assert.Less(t, r.start+r.took, election+rideBound, "%s done within the election + %v", r.what, rideBound)
		}
	}
}

// With a majority of the members down, Open fails within its dial timeout
// and says that the cluster has no majority, naming the members that do
// not answer, instead of blaming the first endpoint alone.
func TestOpenWithoutQuorumSaysWhy(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t, etcdtest.WithMembers(3), etcdtest.WithFsync(), etcdtest.WithElection(100*time.Millisecond, time.Second))
	ms := c.Members()
	ms[0].Kill(t)
	ms[1].Kill(t)
	cfg := dlock.Config{Backend: dlock.BackendEtcd, Endpoints: c.HostPorts(), DialTimeout: 3 * time.Second}
	_, err := dlock.Open(t.Context(), cfg)
	require.Error(t, err)
	t.Log(err)
	assert.ErrorContains(t, err, ms[0].HostPort()+" does not accept connections")
	assert.ErrorContains(t, err, ms[1].HostPort()+" does not accept connections")
	assert.ErrorContains(t, err, "1 of 3 members answer, and etcd needs a majority")
}
