package main

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

func TestRunPassesTokenAndExitCode(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	dsn := "etcd://" + hostPort(c.Endpoints()[0])

	r := runCLI(t, "run", "--lock", "jobs/nightly", "--dsn", dsn, "--",
		"sh", "-c", `echo "$DLOCK_LOCK"; echo "$DLOCK_TOKEN"; exit 7`)
	require.Equal(t, 7, r.code, "stderr: %s", r.stderr)
	assert.Empty(t, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, "stdout: %q", r.stdout)
	assert.Equal(t, "jobs/nightly", lines[0])
	tok, err := fence.ParseToken(lines[1])
	require.NoError(t, err)
	assert.Equal(t, "jobs/nightly", tok.Name)
	assert.NotZero(t, tok.Seq)

	// A second run gets a higher token, and nothing is left behind.
	r2 := runCLI(t, "run", "--lock", "jobs/nightly", "--endpoints", c.Endpoints()[0], "--", "sh", "-c", `echo "$DLOCK_TOKEN"`)
	require.Equal(t, 0, r2.code, "stderr: %s", r2.stderr)
	tok2, err := fence.ParseToken(strings.TrimSpace(r2.stdout))
	require.NoError(t, err)
	assert.Greater(t, tok2.Seq, tok.Seq)
	resp, err := cli.Get(t.Context(), "dlock/lock/jobs%2Fnightly/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	assert.Zero(t, resp.Count, "the lock's keys are deleted after run")
}

func TestRunCommandNotFound(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	r := runCLI(t, "run", "--lock", "x", "--endpoints", c.Endpoints()[0], "--", "/nonexistent/cmd")
	assert.Equal(t, 127, r.code)
	oneLineErr(t, r.stderr)
}

// TestRunKillsChildWhenLockLost revokes the running dlock's lease from
// another client: the child must be stopped and dlock must exit 3.
func TestRunKillsChildWhenLockLost(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)

	t.Run("child exits on SIGTERM", func(t *testing.T) {
		p := start(t, "run", "--lock", "lost/term", "--endpoints", c.Endpoints()[0], "--",
			"sh", "-c", trapTERM(0))
		p.waitLine(t, "ready")
		revokeHolder(t, cli, "dlock/lock/lost%2Fterm/")
		code, rest := p.wait(t, 15*time.Second)
		assert.Equal(t, exitLockLost, code, "stderr: %s", p.stderr)
		assert.Contains(t, rest, "got TERM")
		oneLineErr(t, p.stderr.String())
		assert.Contains(t, p.stderr.String(), "lock lost")
	})
	t.Run("child ignoring SIGTERM is killed after the grace period", func(t *testing.T) {
		p := start(t, "run", "--lock", "lost/kill", "--grace", "500ms", "--endpoints", c.Endpoints()[0], "--",
			"sh", "-c", `trap '' TERM; sleep 60 & echo ready; wait; echo survived`)
		p.waitLine(t, "ready")
		revoked := time.Now()
		revokeHolder(t, cli, "dlock/lock/lost%2Fkill/")
		code, rest := p.wait(t, 15*time.Second)
		assert.Equal(t, exitLockLost, code, "stderr: %s", p.stderr)
		assert.NotContains(t, rest, "survived")
		assert.GreaterOrEqual(t, time.Since(revoked), 500*time.Millisecond, "SIGKILL comes after --grace")
	})
}

// revokeHolder revokes the lease of the first key under prefix.
func revokeHolder(t *testing.T, cli *clientv3.Client, prefix string) {
	t.Helper()
	resp, err := cli.Get(t.Context(), prefix, clientv3.WithFirstCreate()...)
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1, "a holder under %s", prefix)
	require.NotZero(t, resp.Kvs[0].Lease)
	_, err = cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease))
	require.NoError(t, err)
}

func TestRunForwardsSignals(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	p := start(t, "run", "--lock", "sig", "--endpoints", c.Endpoints()[0], "--",
		"sh", "-c", trapTERM(5))
	p.waitLine(t, "ready")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	code, rest := p.wait(t, 15*time.Second)
	assert.Equal(t, 5, code, "the child's exit code; stderr: %s", p.stderr)
	assert.Contains(t, rest, "got TERM")
}

// TestRunTimeoutAndInspect holds a lock with a waiter, inspects it, and
// checks that run --timeout gives up while it is held.
func TestRunTimeoutAndInspect(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := t.Context()
	newMutex := func(owner string) *lock.Mutex {
		s, err := session.New(ctx, cli)
		require.NoError(t, err)
		t.Cleanup(func() { s.Close(context.Background()) })
		m, err := lock.New(s, "reports", lock.WithOwner(owner))
		require.NoError(t, err)
		return m
	}
	held, err := newMutex("holder-1").Lock(ctx)
	require.NoError(t, err)

	// A waiter queues; the watch tells when its key exists.
	rev := int64(held.Token().Seq)
	w := cli.Watch(ctx, "dlock/lock/reports/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	wctx, cancel := context.WithCancel(ctx)
	waiterDone := make(chan error, 1)
	go func() { _, err := newMutex("waiter-2").Lock(wctx); waiterDone <- err }()
	t.Cleanup(func() { cancel(); <-waiterDone })
	select {
	case ev := <-w:
		require.NoError(t, ev.Err())
		require.NotEmpty(t, ev.Events)
	case <-time.After(cmdTimeout):
		require.FailNow(t, "waiter did not queue")
	}

	r := runCLI(t, "inspect", "--json", "--endpoints", c.Endpoints()[0], "reports")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	var res inspectResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stdout)
	require.NotNil(t, res.Holder)
	assert.Equal(t, held.Token().String(), res.Holder.Token)
	assert.Equal(t, "holder-1", res.Holder.Owner)
	assert.Positive(t, res.Holder.TTLLeftSeconds)
	require.Len(t, res.Waiting, 1)
	assert.Equal(t, "waiter-2", res.Waiting[0].Owner)
	assert.Greater(t, res.Waiting[0].Seq, res.Holder.Seq)

	r = runCLI(t, "inspect", "reports", "--endpoints", c.Endpoints()[0])
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stdout, "holder-1")
	assert.Contains(t, r.stdout, "waiter-2")
	assert.Contains(t, r.stdout, "no timestamps")

	r = runCLI(t, "inspect", "--endpoints", c.Endpoints()[0], "nobody")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stdout, "nobody holds it")

	// Interrupted while waiting: 128+SIGINT, and its key is removed.
	resp, err := cli.Get(ctx, "dlock/lock/reports/", clientv3.WithPrefix())
	require.NoError(t, err)
	w = cli.Watch(ctx, "dlock/lock/reports/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	p := start(t, "run", "--lock", "reports", "--endpoints", c.Endpoints()[0], "--", "true")
	select {
	case ev := <-w:
		require.NoError(t, ev.Err())
		require.NotEmpty(t, ev.Events)
		require.True(t, ev.Events[0].IsCreate(), "dlock run queued")
	case <-time.After(cmdTimeout):
		require.FailNow(t, "dlock run did not queue")
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	code, _ := p.wait(t, 15*time.Second)
	assert.Equal(t, 128+int(syscall.SIGINT), code, "stderr: %s", p.stderr)
	oneLineErr(t, p.stderr.String())
	after, err := cli.Get(ctx, "dlock/lock/reports/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	assert.Equal(t, resp.Count, after.Count, "the interrupted run removed its key")

	r = runCLI(t, "run", "--lock", "reports", "--timeout", "300ms", "--endpoints", c.Endpoints()[0], "--", "true")
	assert.Equal(t, 1, r.code)
	oneLineErr(t, r.stderr)
	assert.Contains(t, r.stderr, "not acquired within")
}
