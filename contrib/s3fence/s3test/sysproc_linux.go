package s3test

import (
	"os"
	"syscall"
)

// sysProcAttr makes the server die with the test binary (Pdeathsig), even
// if the binary is killed before its cleanups run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// xattrs reports whether dir's filesystem takes user extended attributes,
// where versitygw keeps object metadata by default.
func xattrs(dir string) bool {
	f, err := os.CreateTemp(dir, ".xattr-")
	if err != nil {
		return false
	}
	name := f.Name()
	_ = f.Close()
	defer os.Remove(name)
	return syscall.Setxattr(name, "user.s3test", []byte("1"), 0) == nil
}
