package s3test

import "syscall"

// sysProcAttr makes the server die with the test binary (Pdeathsig), even
// if the binary is killed before its cleanups run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
