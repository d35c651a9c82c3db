//go:build linux

package guardian

import (
	"os"
	"os/signal"
	"runtime"
	"syscall"
)

// Exit codes of the guardian, besides CMD's, which are run's (see the
// dlock command's exit codes).
const (
	exitDlockDied = 1   // dlock died while CMD ran: nobody reads this one
	exitUsage     = 2   // not started by dlock run
	exitNoCommand = 127 // CMD could not be started
)

// droppedSignals are the signals that the guardian catches and drops (see
// the package doc). Caught signals are reset to their default action in
// CMD.
var droppedSignals = []os.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGPIPE,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGVTALRM,
	syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGIO, syscall.SIGPWR,
}

// init runs the guardian, and exits, if this process is one.
func init() {
	if len(os.Args) < 1 || os.Args[0] != Name {
		return
	}
	var st syscall.Stat_t
	if len(os.Args) < 3 || os.Args[1] != "--" ||
		syscall.Fstat(ControlFD, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		os.Stderr.WriteString(Name + ": started by dlock run only (with a control pipe on fd " + itoa(ControlFD) + ")\n")
		os.Exit(exitUsage)
	}
	os.Exit(run(os.Args[2:]))
}

// run starts argv and guards it until it ends; it returns the guardian's
// exit code.
func run(argv []string) int {
	// CMD gets SIGKILL when the thread that forked it ends: this one,
	// which never ends before the process does.
	runtime.LockOSThread()
	syscall.CloseOnExec(ControlFD)
	ctl := os.NewFile(ControlFD, "dlock-control")
	parent := os.Getppid()

	drop := make(chan os.Signal, 1) // never read: the signals are dropped
	for _, s := range droppedSignals {
		if !signal.Ignored(s) {
			signal.Notify(drop, s)
		}
	}
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	t := &tree{root: os.Getpid(), chld: chld}
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0, 0, 0, 0); e != 0 {
		t.warn("no child subreaper (" + e.Error() + "): processes that leave " + argv[0] + "'s tree outlive a killed dlock")
	}

	// CMD gets the guardian's standard streams and environment, which are
	// dlock's (with $DLOCK_LOCK and $DLOCK_TOKEN).
	path, err := lookPath(argv[0])
	var cmd *os.Process
	if err == nil {
		cmd, err = os.StartProcess(path, argv, &os.ProcAttr{
			Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
			Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
		})
	}
	if err != nil {
		os.Stderr.WriteString("dlock run: " + err.Error() + "\n")
		return exitNoCommand
	}
	// The guardian reaps CMD itself (tree.reap: wait4 on any child), with
	// the orphans it adopts: cmd.Wait is never called.
	t.cmd, t.pgid = cmd.Pid, cmd.Pid

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
			sig := syscall.Signal(b &^ TreeBit)
			switch {
			case !ok:
				what := " and every process it started ("
				if len(t.endAll()) > 0 {
					what = " and the processes it started that it may kill ("
				}
				os.Stderr.WriteString("dlock run: dlock (pid " + itoa(parent) + ") died while " + argv[0] +
					" ran: the guardian killed " + argv[0] + what + itoa(len(t.dead)) + " in all)\n")
				return exitDlockDied
			case b&TreeBit == 0:
				t.signalGroup(sig)
			case sig == syscall.SIGKILL:
				t.endAll()
				return t.code()
			default:
				stopping = true
				t.signalAll(sig, true)
			}
		}
	}
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
