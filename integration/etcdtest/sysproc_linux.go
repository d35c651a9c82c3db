package etcdtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// setDeathSignal has the kernel kill the member when the test process
// dies, however it dies.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// reservePort binds a TCP socket to addr (127.0.0.1:port) without
// listening on it and without SO_REUSEADDR: no other socket can bind the
// port while it is open, and a connection to it is refused, as one to a
// server that is down. Closing it frees the port at once.
func reservePort(addr string) (io.Closer, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, err
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "reserved "+addr), nil
}

// waitStopped waits until every thread of process pid is stopped (state
// T in /proc/pid/task/*/stat), for at most d: SIGSTOP is delivered
// asynchronously, and a member still running for a few milliseconds
// after Pause returned could commit a write that the test expects to
// fail. The kernel sends no notice to a process that is not the parent's
// waiter, so it polls, every millisecond.
func waitStopped(pid int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		running, err := runningThreads(pid)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // the process is gone
		}
		if err != nil || running == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d threads of process %d still run %v after SIGSTOP", running, pid, d)
		}
		time.Sleep(time.Millisecond)
	}
}

// runningThreads counts the threads of pid that are not stopped.
func runningThreads(pid int) (int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue // the thread exited
		}
		// The state follows the command name in parentheses, which may
		// itself hold spaces or parentheses: read after the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) {
			return 0, fmt.Errorf("/proc/%d/task/%s/stat: %q", pid, task.Name(), stat)
		}
		if s := stat[i+2]; s != 'T' && s != 't' && s != 'Z' && s != 'X' {
			n++
		}
	}
	return n, nil
}
