package etcdtest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal has the kernel kill the member when the test process
// dies, however it dies.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
