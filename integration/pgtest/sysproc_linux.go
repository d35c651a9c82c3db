package pgtest

import "syscall"

// sysProcAttr runs a child as cred (nil: as the test's own user) and makes it
// die with the test binary (Pdeathsig), even if the binary is killed before
// its cleanups run. Go sets the parent-death signal after switching
// credentials, so the switch does not clear it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
}
