package main

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/etcdtest"
)

func TestElectAndObserve(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	ep := c.Endpoints()[0]

	obs := start(t, "elect", "--observe", "--endpoints", ep, "scheduler")
	obs.waitLine(t, "no leader")

	leader := start(t, "elect", "scheduler", "node-1", "--endpoints", ep)
	line := leader.waitLine(t, "elected:")
	var epoch uint64
	_, err := fmt.Sscanf(line, "elected: leader of \"scheduler\" with epoch %d", &epoch)
	require.NoError(t, err, line)
	obs.waitLine(t, fmt.Sprintf(`leader "node-1" epoch %d`, epoch))

	// A second candidate waits until the first resigns.
	second := start(t, "elect", "--endpoints", ep, "scheduler", "node-2")
	second.waitLine(t, "campaigning")

	require.NoError(t, leader.cmd.Process.Signal(syscall.SIGINT))
	code, rest := leader.wait(t, 15*time.Second)
	assert.Equal(t, 0, code, "stderr: %s", leader.stderr)
	assert.Contains(t, rest, "resigned")

	line = second.waitLine(t, "elected:")
	var epoch2 uint64
	_, err = fmt.Sscanf(line, "elected: leader of \"scheduler\" with epoch %d", &epoch2)
	require.NoError(t, err, line)
	assert.Greater(t, epoch2, epoch)
	obs.waitLine(t, fmt.Sprintf(`leader "node-2" epoch %d`, epoch2))

	require.NoError(t, second.cmd.Process.Signal(syscall.SIGTERM))
	code, _ = second.wait(t, 15*time.Second)
	assert.Equal(t, 0, code, "stderr: %s", second.stderr)
	obs.waitLine(t, "no leader")

	require.NoError(t, obs.cmd.Process.Signal(syscall.SIGINT))
	code, _ = obs.wait(t, 15*time.Second)
	assert.Equal(t, 0, code, "stderr: %s", obs.stderr)
}

func TestElectLeadershipLost(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	p := start(t, "elect", "--endpoints", c.Endpoints()[0], "svc", "v")
	p.waitLine(t, "elected:")
	revokeHolder(t, cli, "dlock/election/svc/")
	code, _ := p.wait(t, 15*time.Second)
	assert.Equal(t, exitLockLost, code, "stderr: %s", p.stderr)
	oneLineErr(t, p.stderr.String())
	assert.Contains(t, p.stderr.String(), "lost")
}
