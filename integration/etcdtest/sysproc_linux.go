package etcdtest

import (
	"io"
	"net/netip"
	"os"
	"os/exec"
	"syscall"
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
