//go:build !linux

package etcdtest

import (
	"errors"
	"io"
	"os/exec"
	"time"
)

// setDeathSignal does nothing here: a member outlives a test process that
// is killed; t.Cleanup stops it otherwise.
func setDeathSignal(*exec.Cmd) {}

// reservePort is not supported here: a down member's ports are not held.
func reservePort(string) (io.Closer, error) { return nil, errors.ErrUnsupported }

// waitStopped cannot tell here; Pause returns once the signal is sent.
func waitStopped(int, time.Duration) error { return nil }
