//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/dlock-go/dlock/integration/etcdtest"
)

// childDeathBound is how soon after dlock is SIGKILLed its child must be
// gone (issue 12): the guardian learns of dlock's end as dlock exits (the
// kernel closes dlock's end of their pipe), so this is slack for a loaded
// machine, not a wait.
const childDeathBound = time.Second

// TestRunChildDiesWithDlock kills dlock run with SIGKILL, as the OOM killer
// or "kill -9" would: it gets no chance to stop its child, and the
// guardian must (TestRunTreeDiesWithDlock covers the child's own
// children). The lock is then released by etcd when the session's lease
// expires, a TTL after the last heartbeat.
func TestRunChildDiesWithDlock(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	const ttl = 2 * time.Second // session.MinTTL: the release comes soon
	ep := c.Endpoints()[0]
	// The shell prints its PID and execs sleep in its place: the child
	// whose PID the test knows is the one that must die.
	p := start(t, "run", "--lock", "orphan", "--ttl", ttl.String(), "--endpoints", ep, "--",
		"sh", "-c", `echo "pid $$"; exec sleep 60`)
	var pid int
	line := p.waitLine(t, "pid ")
	_, err := fmt.Sscanf(line, "pid %d", &pid)
	require.NoError(t, err, line)
	exited := watchExit(t, pid)

	resp, err := cli.Get(t.Context(), "dlock/lock/orphan/", clientv3.WithPrefix())
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1, "dlock holds the lock while its child runs")
	ttlResp, err := cli.TimeToLive(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease))
	require.NoError(t, err)
	require.EqualValues(t, ttl/time.Second, ttlResp.GrantedTTL)

	killed := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	took, ok := exited(killed, childDeathBound)
	require.True(t, ok, "the child (pid %d) still runs %v after dlock was killed", pid, childDeathBound)
	t.Logf("child gone %v after SIGKILL to dlock", took)
	code, _ := p.wait(t, cmdTimeout)
	assert.Equal(t, -1, code, "dlock was killed by a signal")

	// Nobody revoked the lease: etcd expires it a TTL after the last
	// heartbeat, and a new run is granted the lock.
	r := runCLI(t, "run", "--lock", "orphan", "--timeout", "30s", "--endpoints", ep, "--", "true")
	assert.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	t.Logf("lock granted again %v after dlock was killed (session TTL %v)", time.Since(killed), ttl)
}

// watchExit starts watching process pid (not a child of the test) and
// returns a function that waits until bound after start for it to exit,
// and reports how long after start it was seen gone. It uses a pidfd,
// which becomes readable when the process exits (zombie or reaped), or, on
// kernels without pidfd_open, polls /proc. If the process still runs when
// the test ends, it is killed then.
func watchExit(t *testing.T, pid int) func(start time.Time, bound time.Duration) (time.Duration, bool) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		t.Logf("pidfd_open: %v; polling /proc/%d", err, pid)
		t.Cleanup(func() {
			if running(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		})
		return func(start time.Time, bound time.Duration) (time.Duration, bool) {
			for time.Since(start) < bound {
				if !running(pid) {
					return time.Since(start), true
				}
				time.Sleep(time.Millisecond) // no notification without a pidfd
			}
			return time.Since(start), !running(pid)
		}
	}
	require.NoError(t, err, "pidfd_open %d", pid)
	t.Cleanup(func() {
		// A survivor would hold dlock's stdout open, and start's cleanup
		// would wait for it; the pidfd cannot hit a reused PID.
		unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		unix.Close(fd)
	})
	require.True(t, running(pid), "the child (pid %d) runs", pid)
	return func(start time.Time, bound time.Duration) (time.Duration, bool) {
		for {
			left := bound - time.Since(start)
			if left <= 0 {
				return time.Since(start), false
			}
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(fds, int(left.Milliseconds())+1)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			require.NoError(t, err)
			if n > 0 {
				return time.Since(start), true
			}
		}
	}
}

// running reports whether pid is a live process: it exists and is not a
// zombie (dead, waiting for its new parent to reap it).
func running(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name, which may contain
	// spaces and parentheses itself.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	state := strings.Fields(rest)[0]
	return state != "Z" && state != "X"
}
