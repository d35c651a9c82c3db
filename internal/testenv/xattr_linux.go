package testenv

import (
	"os"
	"syscall"
)

// Xattrs reports whether dir's filesystem takes user extended attributes
// (where versitygw keeps object metadata by default; elsewhere it needs a
// sidecar directory).
func Xattrs(dir string) bool {
	f, err := os.CreateTemp(dir, ".xattr-")
	if err != nil {
		return false
	}
	name := f.Name()
	_ = f.Close()
	defer os.Remove(name)
	return syscall.Setxattr(name, "user.dlock", []byte("1"), 0) == nil
}
