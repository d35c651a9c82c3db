//go:build linux || freebsd

package main

import "syscall"

// setDeathSignal has the kernel SIGKILL the child when its parent dies,
// however it dies (SIGKILL, the OOM killer): prctl(PR_SET_PDEATHSIG) on
// Linux, procctl(PROC_PDEATHSIG_CTL) on FreeBSD. On Linux the signal comes
// when the thread that forked the child exits, hence startChild. It
// reaches the child only, not the processes the child starts: on Linux the
// parent is the guardian, which ends those (see package guardian); on
// FreeBSD it is dlock, and they outlive it.
func setDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
