package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/etcdtest"
)

func TestDemo(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "demo")
	require.Equal(t, 0, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "write REJECTED: fence: stale token")
	assert.Contains(t, r.stdout, "CORRUPTED")
	assert.Less(t, r.elapsed, 30*time.Second)
	t.Logf("demo took %v:\n%s", r.elapsed, r.stdout)
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"demo", "run", "elect", "inspect", "bench"} {
		r := runCLI(t, cmd, "--help")
		assert.Equal(t, 0, r.code, cmd)
		assert.Contains(t, r.stderr, "Usage: dlock "+cmd, cmd)
	}
	r := runCLI(t, "--help")
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stderr, "dlock demo")
}

func TestBadUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{},
		{"nope"},
		{"run", "--bogus"},
		{"run", "--", "true"},
		{"run", "--lock", "x"},
		{"run", "--lock", "bad name", "--", "true"},
		{"run", "--lock", "x", "--ttl", "1500ms", "--", "true"},
		{"run", "--lock", "x", "--dsn", "redis://127.0.0.1:6379", "--owner", "me", "--", "true"},
		{"run", "--lock", "x", "--dsn", "redis://127.0.0.1:6379", "--ttl", "-1s", "--", "true"},
		{"run", "--lock", "x", "--dsn", "redlock://127.0.0.1:6379,127.0.0.1:6380", "--", "true"},
		{"run", "--lock", "x", "--endpoints", "https://h:2379", "--", "true"},
		{"inspect", "--dsn", "redis://127.0.0.1:6379", "x"},
		{"elect", "--dsn", "redlock://h1,h2,h3", "x", "v"},
		{"run", "--lock", "x", "--dsn", "etcd://h:1", "--endpoints", "h:2", "--", "true"},
		{"inspect"},
		{"inspect", "a", "b"},
		{"elect", "only-name"},
		{"elect", "--observe"},
		{"bench"},
		{"bench", "--dsn", "etcd://127.0.0.1:2379", "--clients", "0"},
		{"bench", "--dsn", "mysql://x"},
		{"demo", "extra"},
	} {
		r := runCLI(t, args...)
		assert.Equal(t, 2, r.code, "dlock %q: stderr %q", args, r.stderr)
		if len(args) > 0 {
			oneLineErr(t, r.stderr)
		}
	}
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	ep := etcdtest.FreeAddr(t) // free a moment ago: nothing listens there
	for _, args := range [][]string{
		{"run", "--lock", "x", "--endpoints", ep, "--", "true"},
		{"run", "--lock", "x", "--dsn", "etcd://" + ep, "--", "true"},
		{"run", "--lock", "x", "--dsn", "redis://" + ep, "--", "true"},
		{"inspect", "--endpoints", ep, "x"},
		{"elect", "--endpoints", ep, "x", "v"},
		{"bench", "--dsn", "etcd://" + ep + "?dial_timeout=2s", "--duration", "1s"},
	} {
		r := runCLI(t, args...)
		assert.Equal(t, 1, r.code, "dlock %q: stderr %q", args, r.stderr)
		assert.Less(t, r.elapsed, 10*time.Second, "dlock %q", args)
		oneLineErr(t, r.stderr)
		assert.True(t, strings.Contains(r.stderr, ep), "stderr %q names the endpoint", r.stderr)
	}
}
