//go:build !linux

package etcdtest

import "os/exec"

// setDeathSignal does nothing here: a member outlives a test process that
// is killed; t.Cleanup stops it otherwise.
func setDeathSignal(*exec.Cmd) {}
