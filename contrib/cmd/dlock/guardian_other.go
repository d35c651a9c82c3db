//go:build !linux

package main

// guardianMain reports that this process is no guardian: only Linux has
// one (see guardian_linux.go).
func guardianMain([]string) (int, bool) { return 0, false }
