package main

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/etcdtest"
)

// holdingRun starts dlock run with args and the holder script: it prints
// $DLOCK_TOKEN, then "ready", then waits for SIGTERM. It returns the run
// once it holds, with its token.
func holdingRun(t *testing.T, args ...string) (*proc, fence.Token) {
	t.Helper()
	p := start(t, append(append([]string{"run"}, args...), "--", "sh", "-c", `echo "token $DLOCK_TOKEN"; `+trapTERM(0))...)
	line := p.waitLine(t, "token ")
	tok, err := fence.ParseToken(line[len("token "):])
	require.NoError(t, err, line)
	p.waitLine(t, "ready")
	return p, tok
}

// stop sends p SIGTERM (forwarded to its command) and checks it exits 0.
func stop(t *testing.T, p *proc) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	code, _ := p.wait(t, 15*time.Second)
	assert.Equal(t, 0, code, "stderr: %s", p.stderr)
}

// TestRunPermits: two runs with --permits 2 hold at once; a third cannot
// get a permit while they hold, one with another number of permits is
// refused, and a permit freed is granted to the next run.
func TestRunPermits(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	ep := c.Endpoints()[0]
	a, ta := holdingRun(t, "--lock", "pool", "--permits", "2", "--owner", "a", "--endpoints", ep)
	b, tb := holdingRun(t, "--lock", "pool", "--permits", "2", "--owner", "b", "--endpoints", ep)
	assert.Equal(t, "pool", ta.Name)
	assert.Greater(t, tb.Seq, ta.Seq, "permits' tokens increase in grant order")

	r := runCLI(t, "run", "--lock", "pool", "--permits", "2", "--timeout", "300ms", "--endpoints", ep, "--", "true")
	assert.Equal(t, exitError, r.code, "both permits are taken; stderr: %s", r.stderr)
	assert.Contains(t, r.stderr, "not acquired within")

	r = runCLI(t, "run", "--lock", "pool", "--permits", "3", "--endpoints", ep, "--", "true")
	assert.Equal(t, exitError, r.code, "stderr: %s", r.stderr)
	oneLineErr(t, r.stderr)
	assert.Contains(t, r.stderr, "permits mismatch")
	// A plain run is one more entry of the queue, exclusive: it waits.
	r = runCLI(t, "run", "--lock", "pool", "--timeout", "300ms", "--endpoints", ep, "--", "true")
	assert.Equal(t, exitError, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stderr, "not acquired within")

	stop(t, a)
	c3, t3 := holdingRun(t, "--lock", "pool", "--permits", "2", "--endpoints", ep)
	assert.Greater(t, t3.Seq, tb.Seq)
	stop(t, b)
	stop(t, c3)
	assert.Zero(t, etcdtest.KeyCount(t, c.Client(t), "dlock/lock/pool/"), "nothing left behind")
}

// TestRunShared: --shared runs hold together; a writer (a plain run, or
// --rw) waits for them, and readers wait for a writer.
func TestRunShared(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	ep := c.Endpoints()[0]
	r1, _ := holdingRun(t, "--lock", "cfg", "--shared", "--endpoints", ep)
	r2, _ := holdingRun(t, "--lock", "cfg", "--shared", "--endpoints", ep)
	for _, args := range [][]string{{}, {"--rw"}} {
		r := runCLI(t, append(append([]string{"run", "--lock", "cfg", "--timeout", "300ms", "--endpoints", ep}, args...), "--", "true")...)
		assert.Equal(t, exitError, r.code, "a writer %q waits for the readers; stderr: %s", args, r.stderr)
		assert.Contains(t, r.stderr, "not acquired within")
	}
	stop(t, r1)
	stop(t, r2)

	for _, args := range [][]string{{}, {"--rw"}} {
		w, wt := holdingRun(t, append([]string{"--lock", "cfg", "--endpoints", ep}, args...)...)
		assert.Equal(t, "cfg", wt.Name)
		r := runCLI(t, "run", "--lock", "cfg", "--shared", "--timeout", "300ms", "--endpoints", ep, "--", "true")
		assert.Equal(t, exitError, r.code, "a reader waits for the writer %q; stderr: %s", args, r.stderr)
		r = runCLI(t, "run", "--lock", "cfg", "--rw", "--timeout", "300ms", "--endpoints", ep, "--", "true")
		assert.Equal(t, exitError, r.code, "writers exclude each other; stderr: %s", r.stderr)
		stop(t, w)
	}
	r := runCLI(t, "run", "--lock", "cfg", "--shared", "--endpoints", ep, "--", "sh", "-c", `echo "$DLOCK_TOKEN"`)
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	_, err := fence.ParseToken(r.stdout[:len(r.stdout)-1])
	assert.NoError(t, err, "a reader gets a token: %q", r.stdout)
	assert.Zero(t, etcdtest.KeyCount(t, c.Client(t), "dlock/lock/cfg/"), "nothing left behind")
}

// TestRunKindsUsage: --permits, --shared and --rw exclude each other, need
// etcd, and --permits must be positive; each error names its flag.
func TestRunKindsUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--permits", "0"}, "--permits 0 must be at least 1"},
		{[]string{"--permits", "-2"}, "--permits -2 must be at least 1"},
		{[]string{"--permits", "2", "--shared"}, "--permits and --shared are mutually exclusive"},
		{[]string{"--shared", "--rw"}, "--shared and --rw are mutually exclusive"},
		{[]string{"--permits", "2", "--rw"}, "--permits and --rw are mutually exclusive"},
		{[]string{"--permits", "2", "--dsn", "redis://127.0.0.1:6379"}, "--permits: etcd only"},
		{[]string{"--shared", "--dsn", "redis://127.0.0.1:6379"}, "--shared: etcd only"},
		{[]string{"--rw", "--dsn", "redlock://127.0.0.1:6379,127.0.0.1:6380,127.0.0.1:6381"}, "--rw: etcd only"},
	} {
		r := runCLI(t, append(append([]string{"run", "--lock", "x"}, tc.args...), "--", "true")...)
		assert.Equal(t, exitUsage, r.code, "dlock run %q: stderr %q", tc.args, r.stderr)
		oneLineErr(t, r.stderr)
		assert.Contains(t, r.stderr, tc.want, "dlock run %q", tc.args)
	}
}
