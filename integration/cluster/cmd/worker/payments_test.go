package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/cluster/history"
	"github.com/dlock-go/dlock/integration/etcdtest"
)

// TestPaymentsKillPoints: a holder of each payments workload is killed at
// each of its kill points while charging order 1 (its dwell and the API's
// delay hold it there), then the next holder's pass runs (-reconcile).
// The audit shows what each workload promises: with the journal and keys
// the order is charged once wherever the holder died; without keys twice
// once the call was made (the next holder charges again); without Pending
// never, when the holder died after its claim and before its call.
func TestPaymentsKillPoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	etcd := etcdtest.New(t)
	bin := t.TempDir()
	build(ctx, t, filepath.Join(bin, "worker"), ".")
	build(ctx, t, filepath.Join(bin, "payments"), "../payments")
	want := map[string]map[string]int{ // effects of order 1, by workload and kill point
		history.PaymentsJournal:   {"intent": 1, "call": 1, "outcome": 1},
		history.PaymentsNoKeys:    {"intent": 1, "call": 2, "outcome": 2},
		history.PaymentsNoPending: {"intent": 0, "call": 1, "outcome": 1},
	}
	id := 0
	t.Run("kill", func(t *testing.T) { // returns once its parallel subtests have, before ctx ends
		for wl, points := range want {
			for point, effects := range points {
				id += 2
				id := id // the subtests run after the loop
				t.Run(wl+"/"+point, func(t *testing.T) {
					t.Parallel()
					dir := t.TempDir()
					api, url := startPayments(ctx, t, filepath.Join(bin, "payments"), filepath.Join(dir, "audit.jsonl"), 300*time.Millisecond)
					args := func(id int, more ...string) []string {
						return append([]string{
							"-id", fmt.Sprint(id), "-workload", wl, "-lock", fmt.Sprintf("dlock-%s-%s", wl, point),
							"-endpoints", strings.Join(etcd.Endpoints(), ","), "-ttl", "2s", "-hold", "1ms",
							"-resource", "http://127.0.0.1:1", "-payments", url,
							"-history", filepath.Join(dir, "history", fmt.Sprintf("w%d.jsonl", id)),
						}, more...)
					}
					// The dwell holds the holder at inside, intent and
					// outcome (at call, the API's delay does); from intent
					// to outcome, within Do's ctx (2 TTLs).
					dwell := map[string]string{"intent": "3s", "call": "0", "outcome": "1500ms"}[point]
					holder := start(ctx, t, filepath.Join(bin, "worker"), args(id, "-rounds", "1", "-dwell", dwell)...)
					if !holder.waitLine(ctx, "PHASE "+point+" 1") {
						holder.cmd.Process.Kill()
						holder.wait()
						t.Fatalf("the holder never reached %s:\n%s", point, holder.stderr.String())
					}
					require.NoError(t, holder.cmd.Process.Kill())
					holder.wait()

					next := start(ctx, t, filepath.Join(bin, "worker"), args(id+1, "-reconcile", "-dwell", "0")...)
					require.NoError(t, next.wait(), "the next holder:\n%s", next.stderr.String())
					require.NoError(t, api.cmd.Process.Signal(syscall.SIGTERM))
					require.NoError(t, api.wait(), "payments:\n%s", api.stderr.String())

					charges, err := history.ReadLines[history.Charge](filepath.Join(dir, "audit.jsonl"))
					require.NoError(t, err)
					n := 0
					for _, c := range charges {
						assert.EqualValues(t, 1, c.Order, "only order 1 was claimed: %+v", c)
						n++
					}
					assert.Equal(t, effects, n, "effects of order 1: %+v", charges)
				})
			}
		}
	})
}

// startPayments starts the payments API on a free loopback port and
// returns it with its URL.
func startPayments(ctx context.Context, t *testing.T, bin, audit string, delay time.Duration) (*proc, string) {
	t.Helper()
	p := start(ctx, t, bin, "-listen", "127.0.0.1:0", "-audit", audit, "-delay", delay.String())
	var addr string
	select {
	case l := <-p.lines:
		_, err := fmt.Sscanf(l, "LISTEN %s", &addr)
		require.NoError(t, err, "payments said %q", l)
	case <-p.eof:
		p.wait()
		t.Fatalf("payments exited:\n%s", p.stderr.String())
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	return p, "http://" + addr
}
