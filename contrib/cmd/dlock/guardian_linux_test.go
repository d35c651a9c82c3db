//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/etcdtest"
)

// treeDeathBound is how soon after dlock is SIGKILLed every process of its
// command's tree must be gone (issue 28): the guardian acts as dlock's
// end of the control pipe closes, so this is slack for a loaded machine.
const treeDeathBound = time.Second

// TestRunTreeDiesWithDlock kills dlock run with SIGKILL while its command
// is a shell with a background child, as most real jobs are, on a real etcd
// process (not one embedded in the test). Every process of the tree (the
// shell, its sleep, and the guardian) must be gone within treeDeathBound,
// and a second run of the same lock must be granted only after that: when
// it runs, no process of the old tree does.
func TestRunTreeDiesWithDlock(t *testing.T) {
	t.Parallel()
	ep := startEtcdProcess(t)
	p := start(t, "run", "--lock", "tree", "--ttl", "2s", "--endpoints", ep, "--",
		"sh", "-c", `sleep 300 & echo "sleep $!"; wait`)
	var sleepPID int
	line := p.waitLine(t, "sleep ")
	_, err := fmt.Sscanf(line, "sleep %d", &sleepPID)
	require.NoError(t, err, line)

	// The tree, as it is now: every descendant of dlock.
	dlockPID := p.cmd.Process.Pid
	pids := descendantsOf(t, dlockPID)
	require.Contains(t, pids, sleepPID, "sleep is a descendant of dlock")
	names := make(map[int]string, len(pids))
	exited := make(map[int]func(time.Time, time.Duration) (time.Duration, bool), len(pids))
	for _, pid := range pids {
		names[pid] = procName(pid)
		exited[pid] = watchExit(t, pid)
	}
	t.Logf("tree of dlock (pid %d): %v", dlockPID, names)

	killed := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	// The next run queues at once; it is granted when etcd expires the
	// killed run's lease, a TTL after its last heartbeat. Its command
	// reports every process of the old tree that still runs.
	var check strings.Builder
	for _, pid := range pids {
		fmt.Fprintf(&check, `s=$(sed 's/.*) //' /proc/%d/stat 2>/dev/null | cut -d' ' -f1); case "$s" in ""|Z|X) ;; *) out="$out, pid %d ($s) still runs";; esac; `, pid, pid)
	}
	next := start(t, "run", "--lock", "tree", "--timeout", "30s", "--endpoints", ep, "--",
		"sh", "-c", check.String()+`echo "granted$out"`)

	var gone time.Duration
	for _, pid := range pids {
		took, ok := exited[pid](killed, treeDeathBound)
		assert.True(t, ok, "%s (pid %d) of dlock's tree still runs %v after dlock was killed", names[pid], pid, treeDeathBound)
		gone = max(gone, took)
	}
	if !t.Failed() {
		t.Logf("every process of the tree gone %v after SIGKILL to dlock", gone)
	}

	granted := next.waitLine(t, "granted")
	grantedAfter := time.Since(killed)
	assert.Equal(t, "granted", granted, "the next run of the lock was granted while the old tree ran")
	assert.Greater(t, grantedAfter, gone, "the next run was granted before the old tree was gone")
	t.Logf("lock granted again %v after dlock was killed (session TTL 2s)", grantedAfter)
	code, _ := next.wait(t, cmdTimeout)
	assert.Equal(t, 0, code, "stderr: %s", next.stderr)

	if !t.Failed() { // else a survivor holds dlock's stderr open
		_, _ = p.wait(t, cmdTimeout)
		assert.Contains(t, p.stderr.String(), fmt.Sprintf("dlock run: dlock (pid %d) died while sh ran: the guardian killed sh and every process it started", dlockPID))
	}
}

// descendantsOf returns the PIDs of every process whose parent chain leads
// to pid, from /proc.
func descendantsOf(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	children := map[int][]int{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue // exited since ReadDir
		}
		// "pid (comm) state ppid ...": comm may hold spaces and ')'.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		ppid, err := strconv.Atoi(f[1])
		require.NoError(t, err)
		children[ppid] = append(children[ppid], p)
	}
	var out []int
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		out = append(out, children[queue[0]]...)
		queue = append(queue, children[queue[0]]...)
	}
	slices.Sort(out)
	return out
}

// procName returns process pid's name (comm).
func procName(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// buildEtcd builds etcd's server main (./integration/containers/etcd, that
// is etcd's etcdmain) into t.TempDir() and returns the binary's path.
func buildEtcd(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "etcd")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", path, "github.com/dlock-go/dlock/integration/containers/etcd").CombinedOutput()
	require.NoError(t, err, "go build etcd:\n%s", out)
	return path
}

// startEtcdProcess runs a one-member etcd as a child process of the test,
// on free loopback ports, with its data in t.TempDir(), and returns its
// client endpoint once etcd says it serves clients. It is stopped when
// the test ends.
func startEtcdProcess(t *testing.T) string {
	t.Helper()
	bin := buildEtcd(t)
	client, peer := "http://"+etcdtest.FreeAddr(t), "http://"+etcdtest.FreeAddr(t)
	cmd := exec.Command(bin,
		"--name", "dlock-test", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "dlock-test="+peer, "--log-outputs", "stderr")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var (
		log   lockedBuffer
		ready = make(chan struct{})
		ended = make(chan struct{})
	)
	go func(ready chan<- struct{}) {
		defer close(ended)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			log.Write(append(sc.Bytes(), '\n'))
			if ready != nil && strings.Contains(sc.Text(), "ready to serve client requests") {
				close(ready)
				ready = nil
			}
		}
	}(ready)
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-ended:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-ended
		}
		cmd.Wait()
	})
	wait := time.NewTimer(cmdTimeout)
	defer wait.Stop()
	select {
	case <-ready:
	case <-ended:
		require.FailNow(t, "etcd exited before serving clients", "log:\n%s", log.String())
	case <-wait.C:
		require.FailNow(t, "etcd did not serve clients", "within %v; log:\n%s", cmdTimeout, log.String())
	}
	return strings.TrimPrefix(client, "http://")
}
