//go:build !linux

package capacity

import "os/exec"

// dieWithParent does nothing here: a worker notices its driver's end when
// its stdin closes.
func dieWithParent(*exec.Cmd) {}
