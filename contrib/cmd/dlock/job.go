package main

import (
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// A job is the command run starts while it holds the lock (CMD), with the
// processes CMD starts: the tree that must stop when the lock is lost or
// when dlock dies. startJob starts one: behind a guardian process on Linux
// (see package guardian), directly elsewhere (startDirect).
//
// A job is used by one goroutine.
type job interface {
	// done is closed when the job has ended (CMD has exited, or the
	// guardian has).
	done() <-chan struct{}
	// result returns, after done, the code run exits with: CMD's exit code,
	// or 128+N if it was killed by signal N. It returns an error instead if
	// the job ended in a way that says nothing about CMD (the guardian was
	// killed).
	result() (int, error)
	// signal sends sig to CMD's process group (SIGINT or SIGTERM that run
	// received and forwards).
	signal(sig os.Signal)
	// stop sends SIGTERM to every process of the tree (the lock was lost).
	stop()
	// kill sends SIGKILL to every process of the tree (--grace has passed
	// since stop).
	kill()
	// close frees what the job holds, after done.
	close()
}

// jobSpec is what startJob starts: CMD's argv and environment, and where
// its standard streams go.
type jobSpec struct {
	argv           []string
	env            []string
	stdout, stderr io.Writer
}

// attach connects cmd to spec's streams and environment.
func (spec jobSpec) attach(cmd *exec.Cmd) {
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, spec.stdout, spec.stderr
	cmd.Env = spec.env
}

// directJob is CMD started by dlock itself, without a guardian: it runs in
// a process group of its own, with a parent-death signal where the system
// has one (setGroup), and every signal goes to that group.
type directJob struct {
	cmd    *exec.Cmd
	exited <-chan struct{}
}

// startDirect starts spec's CMD as a child of dlock.
func startDirect(spec jobSpec) (job, error) {
	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	spec.attach(cmd)
	setGroup(cmd)
	exited, err := startChild(cmd)
	if err != nil {
		return nil, err
	}
	return &directJob{cmd: cmd, exited: exited}, nil
}

func (j *directJob) done() <-chan struct{} { return j.exited }

func (j *directJob) result() (int, error) {
	if code := j.cmd.ProcessState.ExitCode(); code >= 0 {
		return code, nil
	}
	return signalCode(j.cmd.ProcessState), nil
}

func (j *directJob) signal(sig os.Signal) { signalGroup(j.cmd, sig) }
func (j *directJob) stop()                { signalGroup(j.cmd, syscall.SIGTERM) }
func (j *directJob) kill()                { signalGroup(j.cmd, syscall.SIGKILL) }
func (j *directJob) close()               {}

// startChild starts cmd and reaps it on a goroutine locked to its OS
// thread, and returns a channel closed when Wait has returned (then
// cmd.ProcessState is set).
//
// On Linux the parent-death signal that setGroup asks for fires when the
// thread that forked the child exits, not the process; and a thread can
// exit while the process lives (Go ends the thread of a goroutine that
// exits locked to it, and an unlocked goroutine could fork on such a
// thread). So the goroutine that forks stays on its thread until Wait has
// reaped the child, and never unlocks: the thread then ends with it.
func startChild(cmd *exec.Cmd) (<-chan struct{}, error) {
	started, exited := make(chan error, 1), make(chan struct{})
	go func() {
		runtime.LockOSThread() // for good: see above
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		cmd.Wait() // its error is in cmd.ProcessState
		close(exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}
