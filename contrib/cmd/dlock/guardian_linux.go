//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// The guardian is a small process between dlock run and CMD, on Linux. It
// exists so that CMD's whole tree dies with dlock, even when dlock dies
// without a chance to stop it (SIGKILL, the OOM killer), before the lock
// can pass on (a TTL after dlock's last heartbeat):
//
//   - run starts it by re-executing itself (/proc/self/exe, with argv[0]
//     guardianName, which no help text shows), and it starts CMD, in a
//     process group of its own with a parent-death SIGKILL from the
//     guardian, as run did before;
//   - it is a child subreaper (see tree): every process CMD starts stays
//     its descendant, even one that leaves CMD's process group or session;
//   - it holds the read end of a pipe (controlFD) whose only write end is
//     dlock's. The kernel closes that end when dlock exits, however it
//     exits, and the guardian reads EOF: a parent-death notice with no
//     race (if dlock is dead before the guardian looks, its first read is
//     EOF) and no dependence on which thread forked it. Then it SIGKILLs
//     every process of the tree, again until none is left, reaps them, and
//     exits;
//   - otherwise it carries out dlock's requests, one byte each on the
//     pipe: N sends signal N to CMD's process group (SIGINT or SIGTERM
//     that dlock forwards), treeBit|N sends it to every process of the
//     tree (the lock was lost: SIGTERM, then, after --grace, SIGKILL, which
//     ends the tree as on EOF). It exits with CMD's exit code (128+N if
//     CMD was killed by signal N) when CMD exits, or, once a tree signal
//     has been asked for, when the whole tree is gone.
//
// It holds no lock and no connection, reads nothing but the pipe, and
// passes its standard streams and environment to CMD as they come from
// dlock. It is in a process group of its own, and catches the signals that
// would end it (droppedSignals), so that Ctrl-C, a signal to dlock's
// process group ("kill -9 %1", timeout(1)) or to dlock's name (pkill
// dlock: the guardian's is "exe") reaches dlock without it.
//
// Why not a cgroup of its own, ended with cgroup.kill (Linux 5.14)? It
// would catch no more: a process that is not CMD's descendant (started by
// a daemon) is not in CMD's cgroup either. It needs a writable cgroup v2
// directory, which a login session or a container rarely delegates, and
// it leaves a directory behind if the guardian is killed. The subreaper
// works for any user on any kernel since 3.4; a pidfd (5.3) makes each
// signal reach the process that the walk found, not a stranger that
// reused its PID.
const (
	guardianName = "dlock-guardian"
	controlFD    = 3    // the control pipe's read end, in the guardian
	treeBit      = 0x80 // a request for every process of the tree
)

// droppedSignals are the signals the guardian catches and ignores, unless
// it started with them ignored (nohup's SIGHUP): those stay ignored, for
// CMD to inherit as it would from dlock. Caught signals are reset to their
// default action in CMD.
var droppedSignals = []os.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM, unix.SIGPIPE,
	unix.SIGUSR1, unix.SIGUSR2, unix.SIGALRM, unix.SIGVTALRM, unix.SIGXCPU,
	unix.SIGXFSZ, unix.SIGIO, unix.SIGPWR,
}

// guardianMain runs the guardian if args (os.Args) say that this process
// is one, and returns its exit code.
func guardianMain(args []string) (int, bool) {
	if len(args) < 3 || args[0] != guardianName || args[1] != "--" {
		return 0, false
	}
	return runGuardian(args[2:]), true
}

// runGuardian starts argv and guards it until it ends; it returns the
// guardian's exit code.
func runGuardian(argv []string) int {
	// CMD gets SIGKILL when the thread that forked it ends: this one,
	// which never ends before the process (see startChild).
	runtime.LockOSThread()
	var st unix.Stat_t
	if err := unix.Fstat(controlFD, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		fmt.Fprintf(os.Stderr, "%s: started by dlock run only (no control pipe on fd %d)\n", guardianName, controlFD)
		return exitUsage
	}
	unix.CloseOnExec(controlFD)
	ctl := os.NewFile(controlFD, "dlock-control")
	parent := os.Getppid()

	drop := make(chan os.Signal, 1) // never read: the signals are dropped
	for _, s := range droppedSignals {
		if !signal.Ignored(s) {
			signal.Notify(drop, s)
		}
	}
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, unix.SIGCHLD)
	t := &tree{root: os.Getpid(), chld: chld, stderr: os.Stderr}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.warn("no child subreaper (%v): processes that leave %s's tree outlive a killed dlock", err, argv[0])
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	setGroup(cmd) // its own process group, SIGKILL when the guardian dies
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "dlock run: %s\n", oneLine(err.Error()))
		return exitNoCommand
	}
	// The guardian reaps CMD itself (tree.reap, wait4 on any child), as it
	// reaps the orphans it adopts: cmd.Wait is never called.
	t.cmd, t.pgid = cmd.Process.Pid, cmd.Process.Pid

	reqs := readRequests(ctl)
	stopping := false // a tree signal was asked for: exit when the tree is gone
	for {
		select {
		case <-chld:
			t.reap()
			if t.stat != nil && (!stopping || t.none) {
				return t.code()
			}
		case b, ok := <-reqs:
			sig := unix.Signal(b &^ treeBit)
			switch {
			case !ok:
				what := "and every process it started"
				if t.endAll() > 0 {
					what = "and the processes it started that it may kill"
				}
				fmt.Fprintf(os.Stderr, "dlock run: dlock (pid %d) died while %s ran: the guardian killed %s %s (%d in all)\n",
					parent, argv[0], argv[0], what, len(t.dead))
				return exitError
			case b&treeBit == 0:
				t.signalGroup(sig)
			case sig == unix.SIGKILL:
				t.endAll()
				return t.code()
			default:
				stopping = true
				t.signalAll(sig, true)
			}
		}
	}
}

// endAll ends the tree, warns of each process that refused to die, and
// returns how many did.
func (t *tree) endAll() int {
	refused := t.end()
	for _, pid := range refused {
		t.warn("cannot kill pid %d (%s): operation not permitted; it keeps running", pid, comm(pid))
	}
	return len(refused)
}

// code returns the guardian's exit code for CMD's wait status.
func (t *tree) code() int {
	switch {
	case t.stat == nil:
		return 128 + int(unix.SIGKILL) // ended by end, and not yet reaped
	case t.stat.Signaled():
		return 128 + int(t.stat.Signal())
	}
	return t.stat.ExitStatus()
}

// readRequests reads the control pipe on a goroutine: a channel of its
// bytes, closed at EOF (dlock has exited). The goroutine ends with the
// guardian.
func readRequests(ctl *os.File) <-chan byte {
	reqs := make(chan byte, 16)
	go func() {
		defer close(reqs)
		var buf [16]byte
		for {
			n, err := ctl.Read(buf[:])
			for _, b := range buf[:n] {
				reqs <- b
			}
			if err != nil {
				return
			}
		}
	}()
	return reqs
}

// comm returns the name of process pid, or "?".
func comm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}
