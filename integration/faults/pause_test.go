package faults_test

import (
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/integration/faults"
	"github.com/dlock-go/dlock/lock"
)

// Scenario 1. A holder (a child process) is granted the lock and stopped
// with SIGSTOP for longer than its session TTL: the server expires its
// lease, another client is granted the next token and writes. The holder is
// resumed and writes with its old token.
//
//   - fenced: the guard rejects the stale write (0 stale admitted); the
//     porcupine check of the register history is Ok.
//   - unfenced (the control): the stale write goes through and overwrites
//     the newer one; the porcupine check reports Illegal. This proves the
//     test can fail.
//   - local deadline: without a guard, a holder that checks its grant
//     before writing sees Done closed (its local deadline passed while it
//     was stopped) and does not write. The deadline helps; only the fence
//     guarantees, since a pause can fall between the check and the write.
func TestPausedHolder(t *testing.T) {
	c := etcdtest.New(t)
	cases := []struct {
		name      string
		guarded   bool
		checkDone bool
	}{
		{"fenced", true, false},
		{"unfenced control", false, false},
		{"local deadline", false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t)
			if !tc.guarded && !tc.checkDone {
				t.Setenv("DLOCK_ARTIFACTS", t.TempDir()) // the control's failed check is expected
			}
			lockName := "pause-" + strings.ReplaceAll(tc.name, " ", "-")
			hist := faults.NewHistory()
			res := newResource(t, tc.guarded, hist)
			cli := c.Client(t)

			args := []string{"-endpoints", strings.Join(c.Endpoints(), ","), "-name", lockName, "-ttl", "2s", "-resource", res.URL(0), "-value", "stale"}
			if tc.checkDone {
				args = append(args, "-check-done")
			}
			ch := startChild(t, args...)
			line := ch.line(t, ctx)
			require.True(t, strings.HasPrefix(line, "TOKEN "), "holder: %q", line)
			stale, err := strconv.ParseUint(strings.TrimPrefix(line, "TOKEN "), 10, 64)
			require.NoError(t, err)

			prefix := lock.DefaultPrefix + "/" + lockName + "/"
			w := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithRev(int64(stale)+1))
			ch.signal(t, syscall.SIGSTOP)
			// The pause lasts until the server has expired the holder's lease
			// (its key is deleted) and another client has been granted.
			waitEvents(t, ctx, w, clientv3.EventTypeDelete, 1)

			h, err := newMutex(t, etcdtest.Session(t, cli), lockName).Lock(ctx)
			require.NoError(t, err)
			require.Greater(t, h.Token().Seq, stale, "the next grant's token is higher")
			require.Equal(t, 200, res.post(t, ctx, 1, h.Token(), "fresh"))

			ch.signal(t, syscall.SIGCONT)
			ch.proceed(t)
			out := ch.line(t, ctx)
			final := res.read(2)
			require.NoError(t, h.Unlock(ctx))

			result, path := faults.Check(t, faults.FencedRegister, hist.Ops())
			switch {
			case tc.guarded:
				assert.Equal(t, "WROTE 409", out, "the stale write is rejected")
				assert.Equal(t, "fresh", final, "0 stale writes admitted")
				assert.Equal(t, porcupine.Ok, result, "history check failed; visualization: %s", path)
			case tc.checkDone:
				assert.True(t, strings.HasPrefix(out, "LOST "), "the holder sees its grant lost: %q", out)
				assert.Contains(t, out, "expired")
				assert.Equal(t, "fresh", final, "the holder did not write")
				assert.Equal(t, porcupine.Ok, result, "history check failed; visualization: %s", path)
			default:
				assert.Equal(t, "WROTE 200", out, "without a guard the stale write is admitted")
				assert.Equal(t, "stale", final, "the stale write overwrote the newer one")
				assert.Equal(t, porcupine.Illegal, result, "the checker must flag the admitted stale write")
				assert.NotEmpty(t, path)
			}
		})
	}
}
