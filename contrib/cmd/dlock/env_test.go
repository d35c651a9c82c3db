package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/etcdtest"
)

// TestDSNFromEnv: $DLOCK_DSN is the default of --dsn in run, elect,
// inspect and bench; --dsn or --endpoints given on the command line win.
func TestDSNFromEnv(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	hp := c.HostPorts()[0]
	env := []string{envDSN + "=etcd://" + hp + "/from-env"}

	t.Run("run and inspect", func(t *testing.T) {
		t.Parallel()
		p := startEnv(t, env, "run", "--lock", "env/x", "--owner", "env-holder", "--", "sh", "-c", `echo "$DLOCK_TOKEN"; `+trapTERM(0))
		tok, err := fence.ParseToken(p.waitLine(t, "env/x:"))
		require.NoError(t, err)
		p.waitLine(t, "ready")

		r := runCLIEnv(t, env, "inspect", "--json", "env/x")
		require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
		var res inspectResult
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stdout)
		assert.Equal(t, "from-env/lock/env%2Fx/", res.Prefix, "the DSN's prefix")
		require.NotNil(t, res.Holder)
		assert.Equal(t, "env-holder", res.Holder.Owner)
		assert.Equal(t, tok.String(), res.Holder.Token)

		// --prefix still overrides the DSN's: nobody holds the lock there.
		r = runCLIEnv(t, env, "inspect", "--prefix", "elsewhere", "env/x")
		require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
		assert.Contains(t, r.stdout, "nobody holds it")

		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		code, _ := p.wait(t, 15*time.Second)
		assert.Equal(t, 0, code, "stderr: %s", p.stderr)
	})
	t.Run("elect", func(t *testing.T) {
		t.Parallel()
		p := startEnv(t, env, "elect", "env-svc", "node-1")
		p.waitLine(t, "elected:")
		r := runCLIEnv(t, env, "inspect", "--election", "env-svc")
		require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
		assert.Contains(t, r.stdout, "keys under from-env/election/env-svc/")
		assert.Contains(t, r.stdout, "node-1")
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
		code, rest := p.wait(t, 15*time.Second)
		assert.Equal(t, 0, code, "stderr: %s", p.stderr)
		assert.Contains(t, rest, "resigned")
	})
	t.Run("bench", func(t *testing.T) {
		t.Parallel()
		r := runCLIEnv(t, env, "bench", "--clients", "1", "--duration", "500ms")
		require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
		assert.Contains(t, r.stdout, "etcd://"+hp+"/from-env")
	})
	t.Run("flags win", func(t *testing.T) {
		t.Parallel()
		// $DLOCK_DSN names a server that is not there: it must not be used.
		bad := []string{envDSN + "=etcd://" + etcdtest.FreeAddr(t) + "/unused"}
		for _, args := range [][]string{
			{"run", "--lock", "win", "--dsn", "etcd://" + hp, "--", "true"},
			{"run", "--lock", "win", "--endpoints", c.Endpoints()[0], "--", "true"},
			{"inspect", "--dsn", "etcd://" + hp, "win"},
			{"inspect", "--endpoints", hp, "win"},
			{"bench", "--dsn", "etcd://" + hp, "--clients", "1", "--duration", "200ms"},
		} {
			r := runCLIEnv(t, bad, args...)
			assert.Equal(t, 0, r.code, "dlock %q: stderr %q", args, r.stderr)
		}
	})
	t.Run("bad DLOCK_DSN", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			dsn  string
			args []string
			want string
		}{
			{"mysql://x", []string{"run", "--lock", "x", "--", "true"}, "$DLOCK_DSN: dlock: invalid config: dsn: scheme \"mysql\""},
			{"mysql://x", []string{"bench"}, "$DLOCK_DSN: dlock: invalid config"},
			{"redis://127.0.0.1:6379", []string{"inspect", "x"}, "$DLOCK_DSN: inspect works on etcd only"},
			{"redis://127.0.0.1:6379", []string{"elect", "x", "v"}, "$DLOCK_DSN: elect works on etcd only"},
		} {
			r := runCLIEnv(t, []string{envDSN + "=" + tc.dsn}, tc.args...)
			assert.Equal(t, exitUsage, r.code, "dlock %q: stderr %q", tc.args, r.stderr)
			oneLineErr(t, r.stderr)
			assert.Contains(t, r.stderr, tc.want)
		}
	})
}

// TestHelpMentionsEnvAndTLS: every subcommand with --dsn says that
// $DLOCK_DSN is its default and how to ask for TLS.
func TestHelpMentionsEnvAndTLS(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"run", "elect", "inspect", "bench"} {
		r := runCLI(t, cmd, "--help")
		require.Equal(t, 0, r.code, cmd)
		assert.Contains(t, r.stdout, "$DLOCK_DSN", cmd)
		assert.Contains(t, r.stdout, "etcds://", cmd)
	}
	r := runCLI(t, "run", "--help")
	assert.True(t, strings.Contains(r.stdout, "SIGKILL") && strings.Contains(r.stdout, "parent-death signal"), "run --help says what happens to CMD when dlock is killed")
}
