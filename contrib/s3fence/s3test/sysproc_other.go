//go:build !linux

package s3test

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }

// xattrs reports false off Linux: metadata then goes to a sidecar
// directory, which every filesystem supports.
func xattrs(string) bool { return false }
