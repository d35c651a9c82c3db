//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"

	// Its init runs the guardian, in a process started as one (Name).
	"github.com/dlock-go/dlock/contrib/cmd/dlock/internal/guardian"
)

// selfExe is the running dlock binary, whichever path started it and even
// if that file has since been replaced.
const selfExe = "/proc/self/exe"

// guardedJob is CMD started by a guardian (see package guardian), which
// dlock talks to through the write end of the control pipe.
type guardedJob struct {
	guardian  *exec.Cmd
	ctl       *os.File // the control pipe's write end: only dlock has it
	exited    <-chan struct{}
	subreaper bool      // dlock is a child subreaper (see result)
	stderr    io.Writer // dlock's
}

// startJob starts spec's CMD behind a guardian, or directly, with a
// warning, if the guardian cannot be started (no /proc).
func startJob(spec jobSpec) (job, error) {
	if _, err := os.Stat(selfExe); err != nil {
		fmt.Fprintf(spec.stderr, "dlock run: warning: no guardian (%v): if dlock is killed, the processes %s starts outlive it\n", err, spec.argv[0])
		return startDirect(spec)
	}
	// dlock is a child subreaper too: if the guardian is killed on its
	// own, what is left of CMD's tree is reparented to dlock, which ends
	// it (see result).
	subreaper := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == nil
	r, w, err := os.Pipe() // close-on-exec: w stays dlock's alone
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(selfExe)
	cmd.Args = append([]string{guardian.Name, "--"}, spec.argv...)
	spec.attach(cmd)
	cmd.ExtraFiles = []*os.File{r} // guardian.ControlFD
	// A process group of its own: signals for dlock's group (Ctrl-C,
	// "kill -9 %1", timeout(1)) do not reach it. No parent-death signal:
	// the guardian must outlive dlock, to end CMD's tree.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, err
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait() // its error is in cmd.ProcessState
		close(exited)
	}()
	return &guardedJob{guardian: cmd, ctl: w, exited: exited, subreaper: subreaper, stderr: spec.stderr}, nil
}

func (j *guardedJob) done() <-chan struct{} { return j.exited }

// result returns the guardian's exit code, which is CMD's (the guardian
// prints its own errors). If the guardian was killed by a signal, CMD got
// SIGKILL with it (its parent-death signal), and what CMD started was
// reparented to dlock: result ends it, as the guardian would have, and
// returns an error.
func (j *guardedJob) result() (int, error) {
	ws, ok := j.guardian.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return j.guardian.ProcessState.ExitCode(), nil
	}
	name := j.guardian.Args[2] // CMD's argv[0]
	what := fmt.Sprintf("the guardian of %s (pid %d) died of %s", name, j.guardian.Process.Pid, unix.SignalName(ws.Signal()))
	if !j.subreaper {
		return 0, fmt.Errorf("%s: processes %s started may still run", what, name)
	}
	killed, refused := guardian.EndDescendants()
	for pid, comm := range refused {
		fmt.Fprintf(j.stderr, "dlock run: warning: cannot kill pid %d (%s): operation not permitted; it keeps running\n", pid, comm)
	}
	return 0, fmt.Errorf("%s: dlock killed what was left of %s and the processes it started (%d in all)", what, name, killed)
}

// request writes one request byte to the guardian; a guardian that has
// exited reads none, and that is not an error.
func (j *guardedJob) request(b byte) { j.ctl.Write([]byte{b}) }

func (j *guardedJob) signal(sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok && s > 0 && s < guardian.TreeBit {
		j.request(byte(s))
	}
}

func (j *guardedJob) stop()  { j.request(guardian.TreeBit | byte(syscall.SIGTERM)) }
func (j *guardedJob) kill()  { j.request(guardian.TreeBit | byte(syscall.SIGKILL)) }
func (j *guardedJob) close() { j.ctl.Close() }
