//go:build !linux

package testenv

// Xattrs reports false off Linux: a sidecar directory works on every
// filesystem.
func Xattrs(string) bool { return false }
