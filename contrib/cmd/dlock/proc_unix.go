//go:build unix

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// setGroup starts cmd in a process group of its own, so that signals reach
// everything it starts (a shell's children too), and, where the system has
// one, with a parent-death signal: SIGKILL when dlock dies (see
// setDeathSignal). Start cmd with startChild, which keeps the forking
// thread alive for as long as cmd runs.
func setGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
}

// signalGroup sends sig to cmd's process group.
func signalGroup(cmd *exec.Cmd, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return cmd.Process.Signal(sig)
	}
	if err := syscall.Kill(-cmd.Process.Pid, s); err != nil {
		return cmd.Process.Signal(sig)
	}
	return nil
}

// signalCode returns the exit code of a process killed by a signal
// (128+signal, as shells report it), or -1 if it was not killed by one.
func signalCode(state *os.ProcessState) int {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return -1
}
