//go:build linux

package capacity

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel SIGKILL the worker when the driver dies.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
