package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/redistest"
)

// redisKey is the lock key of name under the default prefix ("dlock"), as
// dlock.Open lays it out: "<prefix>:{<name>}".
func redisKey(name string) string { return "dlock:{" + name + "}" }

func TestRunRedisPassesTokenAndExitCode(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	dsn := "redis://" + s.Addr()

	r := runCLI(t, "run", "--dsn", dsn, "--lock", "x", "--",
		"sh", "-c", `echo "$DLOCK_LOCK"; echo "$DLOCK_TOKEN"; exit 5`)
	require.Equal(t, 5, r.code, "stderr: %s", r.stderr)
	assert.Empty(t, r.stderr, "a redis:// grant has a token: no warning")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, "stdout: %q", r.stdout)
	assert.Equal(t, "x", lines[0])
	tok, err := fence.ParseToken(lines[1])
	require.NoError(t, err)
	assert.Equal(t, "x", tok.Name)
	assert.NotZero(t, tok.Seq)

	// A second run gets a higher token, and the lock key is gone after each.
	r2 := runCLI(t, "run", "--dsn", dsn, "--lock", "x", "--", "sh", "-c", `echo "$DLOCK_TOKEN"`)
	require.Equal(t, 0, r2.code, "stderr: %s", r2.stderr)
	tok2, err := fence.ParseToken(strings.TrimSpace(r2.stdout))
	require.NoError(t, err)
	assert.Greater(t, tok2.Seq, tok.Seq)
	n, err := rdb.Exists(t.Context(), redisKey("x")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the lock key is deleted after run")
}

// TestRunRedisRenewsWhileHeld runs a command for longer than the TTL: the
// grant is renewed every TTL/3, so the lock is not lost.
func TestRunRedisRenewsWhileHeld(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	r := runCLI(t, "run", "--dsn", "redis://"+s.Addr()+"?ttl=2s", "--lock", "long", "--", "sleep", "3")
	assert.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Empty(t, r.stderr)
}

// TestRunRedisKillsChildWhenLockLost deletes the lock key behind the running
// dlock's back: the renewal finds it gone, the child is stopped and dlock
// exits 3.
func TestRunRedisKillsChildWhenLockLost(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	const ttl = 2 * time.Second
	p := start(t, "run", "--dsn", "redis://"+s.Addr()+"?ttl="+ttl.String(), "--lock", "lost/x", "--",
		"sh", "-c", trapTERM(0))
	p.waitLine(t, "ready")
	n, err := rdb.Del(t.Context(), redisKey("lost/x")).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "the lock key %s exists while the child runs", redisKey("lost/x"))
	deleted := time.Now()

	code, rest := p.wait(t, 15*time.Second)
	assert.Equal(t, exitLockLost, code, "stderr: %s", p.stderr)
	assert.Contains(t, rest, "got TERM")
	oneLineErr(t, p.stderr.String())
	assert.Contains(t, p.stderr.String(), "lock lost")
	assert.Contains(t, p.stderr.String(), "key expired or taken over", "the renewal, not the local deadline, found the loss")
	// The renewal runs every TTL/3; allow the rest for a loaded machine.
	assert.Less(t, time.Since(deleted), ttl+3*time.Second)
}

func TestRunRedisTimeout(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client(t)
	require.NoError(t, rdb.Set(t.Context(), redisKey("busy"), "someone-else", time.Minute).Err())
	r := runCLI(t, "run", "--dsn", "redis://"+s.Addr(), "--lock", "busy", "--timeout", "300ms", "--", "true")
	assert.Equal(t, 1, r.code)
	oneLineErr(t, r.stderr)
	assert.Contains(t, r.stderr, "not acquired within")
	v, err := rdb.Get(t.Context(), redisKey("busy")).Result()
	require.NoError(t, err)
	assert.Equal(t, "someone-else", v, "the holder's key is untouched")
}

// TestRunRedisReplicasTimeout: with replicas=1 on a node that has no
// replica, no grant is ever confirmed: run gives up at --timeout, says
// why, and leaves no lock key behind.
func TestRunRedisReplicasTimeout(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	r := runCLI(t, "run", "--dsn", "redis://"+s.Addr()+"?replicas=1", "--lock", "confirmed", "--timeout", "500ms", "--", "true")
	assert.Equal(t, 1, r.code)
	oneLineErr(t, r.stderr)
	assert.Contains(t, r.stderr, "not acquired within")
	assert.Contains(t, r.stderr, "replicas acknowledged", "the last attempt's reason")
	n, err := s.Client(t).Exists(t.Context(), redisKey("confirmed")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "no unconfirmed grant left behind")
}

// TestRunRedlock: the child's exit code passes through, DLOCK_TOKEN is the
// wire form with seq 0, and one warning line says so.
func TestRunRedlock(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 3)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	r := runCLI(t, "run", "--dsn", "redlock://"+strings.Join(addrs, ","), "--lock", "rl", "--",
		"sh", "-c", `echo "$DLOCK_TOKEN"; exit 4`)
	require.Equal(t, 4, r.code, "stderr: %s", r.stderr)
	tok, err := fence.ParseToken(strings.TrimSpace(r.stdout))
	require.NoError(t, err)
	assert.Equal(t, fence.Token{Name: "rl"}, tok)
	oneLineErr(t, r.stderr)
	assert.Contains(t, r.stderr, "redlock grants carry no fencing token; DLOCK_TOKEN is \"rl:0\"")
	for i, rdb := range redistest.Clients(t, servers) {
		n, err := rdb.Exists(t.Context(), redisKey("rl")).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "node %d: the lock key is deleted after run", i)
	}
}
