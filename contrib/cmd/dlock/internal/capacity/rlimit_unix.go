//go:build unix

package capacity

import "syscall"

// raiseNoFile raises the soft limit on open files to the hard limit: a
// worker holds many watches and connections.
func raiseNoFile() {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) == nil && r.Cur < r.Max {
		r.Cur = r.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r)
	}
}
