package main

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/dlock-go/dlock/integration/etcdtest"
)

// rideBound is how long after a new leader is elected a run started during
// the election may take to be granted: one lost attempt of a request sent
// to the dead leader (1s), a backoff, the process's start, and slack for a
// loaded machine.
const rideBound = 3 * time.Second

// `dlock run` started while a real 3-process cluster elects a new leader
// (the old one SIGKILLed: no hand-over) is granted once a leader exists:
// every run succeeds, each by the election + rideBound. Before, 5 of 6
// such runs exited 1 after 4 s with "session: grant lease: context
// deadline exceeded (no answer within 5s: check the address ...)".
func TestRunDuringLeaderElection(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t, etcdtest.WithMembers(3), etcdtest.WithFsync(), etcdtest.WithElection(100*time.Millisecond, time.Second))
	dsn := "etcd://" + strings.Join(c.HostPorts(), ",") + "/ride"
	leader := c.Leader(t)
	killed := time.Now()
	leader.Kill(t)
	elected := make(chan time.Duration, 1)
	go func() { c.Leader(t); elected <- time.Since(killed) }()

	type run struct {
		start, took time.Duration
		r           result
	}
	runs := make([]run, 6)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() {
			start := time.Since(killed)
			r := runCLI(t, "run", "--dsn", dsn, "--lock", fmt.Sprintf("r%d", i), "--", "true")
			runs[i] = run{start, time.Since(killed) - start, r}
		})
		time.Sleep(250 * time.Millisecond) // spread the starts over the election: a schedule, not a synchronisation
	}
	wg.Wait()
	election := <-elected
	t.Logf("new leader %v after the kill", election.Round(time.Millisecond))
	for i, r := range runs {
		t.Logf("run %d: started %v after the kill, took %v, exit %d %s", i, r.start.Round(time.Millisecond), r.took.Round(time.Millisecond), r.r.code, r.r.stderr)
		if assert.Equal(t, 0, r.r.code, "run %d: %s", i, r.r.stderr) {
			assert.Less(t, r.start+r.took, election+rideBound, "run %d done within the election + %v", i, rideBound)
		}
	}
}
