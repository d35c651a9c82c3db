//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
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
// it runs, no process of the old tree does. The SIGKILL goes to dlock, or
// to dlock's process group ("kill -9 %1", timeout(1)), which must not take
// the guardian with it.
func TestRunTreeDiesWithDlock(t *testing.T) {
	t.Parallel()
	// etcd as a real process (etcdtest's members are), not in this test
	// process.
	ep := etcdtest.New(t).HostPorts()[0]
	for _, tc := range []struct {
		name  string
		group bool
	}{
		{"SIGKILL to dlock", false},
		{"SIGKILL to dlock's process group", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lockName := "tree-" + strconv.FormatBool(tc.group)
			p := startAttr(t, nil, &syscall.SysProcAttr{Setpgid: tc.group},
				"run", "--lock", lockName, "--ttl", "2s", "--endpoints", ep, "--",
				"sh", "-c", `sleep 300 & echo "sleep $!"; wait`)
			var sleepPID int
			line := p.waitLine(t, "sleep ")
			_, err := fmt.Sscanf(line, "sleep %d", &sleepPID)
			require.NoError(t, err, line)
			pids, exited := watchTree(t, p.cmd.Process.Pid)
			require.Contains(t, pids, sleepPID, "sleep is a descendant of dlock")

			killed := time.Now()
			target := p.cmd.Process.Pid
			if tc.group {
				target = -target
			}
			require.NoError(t, syscall.Kill(target, syscall.SIGKILL))
			// The next run queues at once; it is granted when etcd
			// expires the killed run's lease, a TTL after its last
			// heartbeat. Its command reports every process of the old
			// tree that still runs.
			next := start(t, "run", "--lock", lockName, "--timeout", "30s", "--endpoints", ep, "--",
				"sh", "-c", stillRunning(pids)+`echo "granted$out"`)

			gone, ok := exited(killed, treeDeathBound)
			if ok {
				t.Logf("every process of the tree gone %v after SIGKILL to dlock", gone)
			}
			granted := next.waitLine(t, "granted")
			grantedAfter := time.Since(killed)
			assert.Equal(t, "granted", granted, "the next run of the lock was granted while the old tree ran")
			assert.Greater(t, grantedAfter, gone, "the next run was granted before the old tree was gone")
			t.Logf("lock granted again %v after dlock was killed (session TTL 2s)", grantedAfter)
			code, _ := next.wait(t, cmdTimeout)
			assert.Equal(t, 0, code, "stderr: %s", next.stderr)

			if ok { // else a survivor holds dlock's stderr open
				_, _ = p.wait(t, cmdTimeout)
				assert.Contains(t, p.stderr.String(), fmt.Sprintf(
					"dlock run: dlock (pid %d) died while sh ran: the guardian killed sh and every process it started", p.cmd.Process.Pid))
			}
		})
	}
}

// TestRunLostLockEndsTree revokes a running dlock's lease while its command
// has started a process that left its process group (setsid) and ignores
// SIGTERM: the lost lock's SIGKILL after --grace must reach it too, and
// dlock must exit only when it is gone.
func TestRunLostLockEndsTree(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	p := start(t, "run", "--lock", "lost/tree", "--grace", "500ms", "--endpoints", c.Endpoints()[0], "--",
		"sh", "-c", `setsid sh -c 'trap "" TERM; echo "escaped $$"; exec sleep 300 >/dev/null 2>&1' & wait`)
	var pid int
	line := p.waitLine(t, "escaped ")
	_, err := fmt.Sscanf(line, "escaped %d", &pid)
	require.NoError(t, err, line)
	watchExit(t, pid) // kills it at the end if it survives

	revoked := time.Now()
	revokeHolder(t, c.Client(t), "dlock/lock/lost%2Ftree/")
	code, _ := p.wait(t, 15*time.Second)
	assert.Equal(t, exitLockLost, code, "stderr: %s", p.stderr)
	assert.False(t, running(pid), "the process that left the group (pid %d) still runs after dlock exited, %v after the loss", pid, time.Since(revoked))
}

// TestRunGuardianKilled kills the guardian alone: CMD dies with it (its
// parent-death signal), and what CMD started is reparented to dlock, which
// must end it, report it, and exit 1.
func TestRunGuardianKilled(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	p := start(t, "run", "--lock", "guardian", "--endpoints", c.Endpoints()[0], "--",
		"sh", "-c", `sleep 300 & echo "sleep $!"; wait`)
	p.waitLine(t, "sleep ")
	pids, exited := watchTree(t, p.cmd.Process.Pid)
	guardian := 0
	for _, pid := range pids {
		if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.HasPrefix(string(cmdline), "dlock-guardian\x00") {
			guardian = pid
		}
	}
	require.NotZero(t, guardian, "no dlock-guardian among dlock's descendants %v", pids)

	killed := time.Now()
	require.NoError(t, syscall.Kill(guardian, syscall.SIGKILL))
	took, ok := exited(killed, treeDeathBound)
	assert.True(t, ok, "dlock's tree still runs %v after its guardian was killed", treeDeathBound)
	if !ok {
		return // a survivor holds dlock's stdout open
	}
	t.Logf("tree gone %v after SIGKILL to the guardian", took)
	code, _ := p.wait(t, cmdTimeout)
	assert.Equal(t, exitError, code, "stderr: %s", p.stderr)
	oneLineErr(t, p.stderr.String())
	assert.Contains(t, p.stderr.String(), "died of SIGKILL: dlock killed what was left of sh")
}

// TestRunExitCodeOfKilledCommand: a command killed by signal N makes run
// exit 128+N, as a shell reports it.
func TestRunExitCodeOfKilledCommand(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	r := runCLI(t, "run", "--lock", "killed", "--endpoints", c.Endpoints()[0], "--", "sh", "-c", `kill -TERM $$`)
	assert.Equal(t, 128+int(syscall.SIGTERM), r.code, "stderr: %s", r.stderr)
	assert.Empty(t, r.stderr)
}

// TestGuardianStartsLight runs the binary as a guardian, as run starts it,
// with GODEBUG=inittrace=1, which has Go print a line for each package it
// initializes: the guardian must have run its command, and exited with its
// exit code, before Go initialized any package that dlock's commands need
// (the embedded etcd, gRPC, protobuf, dlock's own), so that it costs a few
// milliseconds and little memory.
func TestGuardianStartsLight(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer w.Close() // the guardian's dlock lives until it has exited
	ctx, cancel := context.WithTimeout(t.Context(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Args = []string{"dlock-guardian", "--", "sh", "-c", "exit 5"}
	cmd.ExtraFiles = []*os.File{r}
	cmd.Env = environ([]string{"GODEBUG=inittrace=1"})
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	r.Close()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "stderr: %s", stderr.String())
	assert.Equal(t, 5, ee.ExitCode(), "the command's exit code")

	inits := initTrace(stderr.String())
	require.Contains(t, inits, "os", "inittrace lists the packages initialized")
	// dlock --help initializes every package of dlock. A few small ones,
	// whose imports happen to be ready, go before the guardian; most, and
	// the heavy ones (the embedded etcd, gRPC), deep in the import graph,
	// must not.
	r2 := runCLIEnv(t, []string{"GODEBUG=inittrace=1"}, "--help")
	all := initTrace(r2.stderr)
	require.Contains(t, all, "go.etcd.io/etcd/server/v3/embed")
	assert.NotContains(t, inits, "go.etcd.io/etcd/server/v3/embed")
	assert.Less(t, len(inits), len(all)/4, "packages initialized before the guardian ran: %v", inits)
	t.Logf("%d of dlock's %d packages with init work initialized before the guardian ran", len(inits), len(all))
}

// initTrace returns the packages that GODEBUG=inittrace=1 lists in stderr.
func initTrace(stderr string) []string {
	var inits []string
	for _, line := range strings.Split(stderr, "\n") {
		if pkg, ok := strings.CutPrefix(line, "init "); ok {
			inits = append(inits, strings.Fields(pkg)[0])
		}
	}
	return inits
}

// watchTree watches every descendant of pid (see watchExit) and returns
// their PIDs and a function that waits until bound after start for all of
// them to exit, and reports how long after start the last was seen gone;
// it fails the test (without stopping it) for each that still runs.
func watchTree(t *testing.T, pid int) ([]int, func(start time.Time, bound time.Duration) (time.Duration, bool)) {
	t.Helper()
	pids := descendantsOf(t, pid)
	names := make(map[int]string, len(pids))
	exited := make(map[int]func(time.Time, time.Duration) (time.Duration, bool), len(pids))
	for _, pid := range pids {
		names[pid] = procName(pid)
		exited[pid] = watchExit(t, pid)
	}
	t.Logf("tree of dlock (pid %d): %v", pid, names)
	return pids, func(start time.Time, bound time.Duration) (time.Duration, bool) {
		var last time.Duration
		all := true
		for _, pid := range pids {
			took, ok := exited[pid](start, bound)
			assert.True(t, ok, "%s (pid %d) of dlock's tree still runs %v after the kill", names[pid], pid, bound)
			last, all = max(last, took), all && ok
		}
		return last, all
	}
}

// stillRunning returns a shell script that appends ", pid N (state) still
// runs" to $out for each of pids that runs (exists and is no zombie).
func stillRunning(pids []int) string {
	var b strings.Builder
	for _, pid := range pids {
		fmt.Fprintf(&b, `s=$(sed 's/.*) //' /proc/%d/stat 2>/dev/null | cut -d' ' -f1); case "$s" in ""|Z|X) ;; *) out="$out, pid %d ($s) still runs";; esac; `, pid, pid)
	}
	return b.String()
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
