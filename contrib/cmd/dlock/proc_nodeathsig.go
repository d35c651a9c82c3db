//go:build unix && !linux && !freebsd

package main

import "syscall"

// setDeathSignal does nothing: macOS, OpenBSD, NetBSD and the other
// systems here have no parent-death signal, so a child outlives a dlock
// that is killed with SIGKILL (it is reparented to init or launchd and
// runs on until it exits; the lock is released a TTL after dlock's last
// heartbeat or renewal).
func setDeathSignal(*syscall.SysProcAttr) {}
