package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/contrib/cmd/dlock/internal/capacity"
	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// capacityCluster starts the 3-member cluster with fsync that the
// capacity runs measure, and options that kill its leader in f (SIGKILL)
// and restart it afterwards.
func capacityCluster(t *testing.T) (*etcdtest.Cluster, capacity.Options) {
	c := etcdtest.New(t, etcdtest.WithMembers(3), etcdtest.WithFsync())
	byURL := func(url string) *etcdtest.Member {
		for _, m := range c.Members() {
			if m.Endpoint() == url {
				return m
			}
		}
		t.Fatalf("no member at %s", url)
		return nil
	}
	o := capacity.Options{
		DSN:      "etcd://" + strings.Join(c.HostPorts(), ","),
		Failover: func(_ context.Context, l capacity.Leader) error { byURL(l.Endpoint).Kill(t); return nil },
		Recover:  func(_ context.Context, l capacity.Leader) error { byURL(l.Endpoint).Restart(t); return nil },
		Progress: testWriter{t},
	}
	return c, o
}

// testWriter logs each write (a progress line) to t.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestCapacitySmoke runs every capacity scenario once, at small numbers,
// on a 3-member etcd with fsync, and checks that every table column is
// filled, that no dlock session was lost and no dlock grant was out of
// FIFO order.
func TestCapacitySmoke(t *testing.T) {
	testenv.SkipUnlessLong(t, "~1-3 min: every capacity scenario at a small scale")
	_, o := capacityCluster(t)
	o.Inflight = []int{1, 16}
	o.Held = []int{100}
	o.HeldSessions = 10
	o.Extra = 20
	o.Waiters = []int{10}
	o.Sessions = []int{20}
	o.Expire = []int{20}
	o.FailoverSessions = []int{50}
	o.Runs = 1
	o.Procs = 2
	o.Clients = 2
	o.TTL = 3 * time.Second // ≥ 3× etcdtest's 500ms election timeout
	o.Window = 4 * time.Second
	o.Duration = 2 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), 170*time.Second)
	defer cancel()
	rep, err := capacity.Run(ctx, o)
	require.NoError(t, err)
	var table bytes.Buffer
	require.NoError(t, capacity.WriteTable(&table, rep))
	t.Logf("\n%s", table.String())
	_, err = json.Marshal(rep)
	require.NoError(t, err)

	require.Equal(t, 3, rep.Cluster.Members)
	want := map[string]int{"a": 2 * 3, "b": 3, "c": 3, "d": 2 * 3, "e": 3, "f": 3}
	got := map[string]int{}
	for _, row := range rep.Rows {
		got[row.Scenario]++
		for _, col := range capacity.Columns(row.Scenario) {
			if row.Impl == capacity.ImplLimit && col == "out_of_order" {
				continue // the limit has no queue, hence no FIFO order
			}
			v, ok := row.Metrics[col]
			require.True(t, ok, "%s %d %s %s: %s missing", row.Scenario, row.Load, row.Variant, row.Impl, col)
			require.False(t, math.IsNaN(v) || math.IsInf(v, 0), "%s %s: %s = %v", row.Scenario, row.Impl, col, v)
			if mayBeZero(col) {
				continue
			}
			require.Positive(t, v, "%s %d %s %s: %s", row.Scenario, row.Load, row.Variant, row.Impl, col)
		}
		if row.Impl == capacity.ImplDlock {
			if row.Scenario == "f" {
				require.Zero(t, row.Metrics["sessions_lost"], "dlock sessions lost in a failover")
			}
			if row.Scenario == "c" {
				require.Zero(t, row.Metrics["out_of_order"], "dlock grants out of FIFO order")
			}
		}
	}
	require.Equal(t, want, got)
}

// mayBeZero says which columns are legitimately zero: counts of faults;
// memory and size deltas of small loads (pages); requests sent to the
// leader itself (a client on a follower reaches the leader through the
// follower: its keepalives and writes are then in all_req_per_s and the
// leader's CPU, not in the leader's gRPC counters).
func mayBeZero(col string) bool {
	switch col {
	case "out_of_order", "sessions_lost", "rss_bytes_per_lock", "db_bytes_per_lock", "leader_mem_bytes_per_waiter",
		"leader_req_per_s", "leader_rx_bytes_per_s":
		return true
	}
	return false
}

// TestCapacityFull runs the capacity scenarios at scale when
// DLOCK_CAPACITY is "full" (issue 37's scales, medians of 3 runs: hours)
// or "mid" (a tenth of them, one run, 10 s windows: about ten minutes on
// two cores) or "big" (only the largest load of b, c, d and f, one run),
// on a 3-member cluster with fsync, and writes the JSON
// report to $DLOCK_CAPACITY_OUT (default capacity.json here).
// $DLOCK_CAPACITY_SCENARIOS (e.g. "a,d") runs only some scenarios, and
// $DLOCK_CAPACITY_RUNS sets the runs per row (their median is reported),
// $DLOCK_CAPACITY_IMPLS (e.g. "concurrency") the implementations,
// $DLOCK_CAPACITY_LOADS (e.g. "1000,100000") the loads of every scenario
// run, and $DLOCK_CAPACITY_TTL (e.g. "30s") the sessions' TTL.
func TestCapacityFull(t *testing.T) {
	mode := os.Getenv("DLOCK_CAPACITY")
	if mode != "full" && mode != "mid" && mode != "big" {
		t.Skip("set DLOCK_CAPACITY=full (or mid, or big) to run the capacity scenarios at scale")
	}
	_, o := capacityCluster(t)
	if mode == "mid" {
		o.Inflight = []int{1, 16, 64, 256}
		o.Held = []int{1000, 10000}
		o.HeldSessions = 100
		o.Waiters = []int{10, 100, 1000}
		o.Sessions = []int{100, 1000}
		o.Expire = []int{1000}
		o.FailoverSessions = []int{1000}
		o.Runs = 1
		o.Window = 10 * time.Second
		o.Duration = 5 * time.Second
	}
	if mode == "big" {
		// Only the largest load of each scenario that has one above mid's.
		o.Held = []int{100000}
		o.Waiters = []int{10000}
		o.Sessions = []int{10000}
		o.FailoverSessions = []int{10000}
		o.Scenarios = []string{"b", "c", "d", "f"}
		o.Runs = 1
		o.Window = 30 * time.Second
	}
	if s := os.Getenv("DLOCK_CAPACITY_SCENARIOS"); s != "" {
		o.Scenarios = strings.Split(s, ",")
	}
	if s := os.Getenv("DLOCK_CAPACITY_LOADS"); s != "" {
		var loads []int
		for f := range strings.SplitSeq(s, ",") {
			n, err := strconv.Atoi(f)
			require.NoError(t, err, "DLOCK_CAPACITY_LOADS")
			loads = append(loads, n)
		}
		o.Inflight, o.Held, o.Waiters, o.Sessions, o.Expire, o.FailoverSessions = loads, loads, loads, loads, loads, loads
	}
	if s := os.Getenv("DLOCK_CAPACITY_IMPLS"); s != "" {
		o.Impls = strings.Split(s, ",")
	}
	if s := os.Getenv("DLOCK_CAPACITY_TTL"); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "DLOCK_CAPACITY_TTL")
		o.TTL = d
	}
	if s := os.Getenv("DLOCK_CAPACITY_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "DLOCK_CAPACITY_RUNS")
		o.Runs = n
	}
	rep, err := capacity.Run(t.Context(), o)
	if rep != nil {
		out := os.Getenv("DLOCK_CAPACITY_OUT")
		if out == "" {
			out = "capacity.json"
		}
		b, jerr := json.MarshalIndent(rep, "", "  ")
		require.NoError(t, jerr)
		require.NoError(t, os.WriteFile(out, b, 0o644))
		var table bytes.Buffer
		require.NoError(t, capacity.WriteTable(&table, rep))
		t.Logf("\n%s", table.String())
	}
	require.NoError(t, err)
}

// TestCapacityMoveLeader runs f without a failover command: the leader
// is moved gracefully, and the report says so.
func TestCapacityMoveLeader(t *testing.T) {
	_, o := capacityCluster(t)
	o.Failover, o.Recover = nil, nil
	o.Scenarios, o.Impls = []string{"f"}, []string{capacity.ImplDlock}
	o.FailoverSessions, o.Runs, o.Procs, o.TTL = []int{10}, 1, 1, 3*time.Second
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rep, err := capacity.Run(ctx, o)
	require.NoError(t, err)
	require.Len(t, rep.Rows, 1)
	assert.Equal(t, "move-leader", rep.Config.Failover)
	assert.Contains(t, rep.Rows[0].Note, "MoveLeader")
	assert.Zero(t, rep.Rows[0].Metrics["sessions_lost"])
	assert.Positive(t, rep.Rows[0].Metrics["all_renewed_s"])
}

// TestCapacityCLI runs dlock bench --capacity as a user would, against a
// 3-member cluster, with --failover-cmd SIGKILLing the leader, and reads
// its JSON document.
func TestCapacityCLI(t *testing.T) {
	c := etcdtest.New(t, etcdtest.WithMembers(3), etcdtest.WithFsync())
	var script strings.Builder
	script.WriteString(`case "$DLOCK_LEADER_ENDPOINT" in `)
	for _, m := range c.Members() {
		fmt.Fprintf(&script, "%s) kill -9 %d;; ", m.Endpoint(), m.PID())
	}
	script.WriteString(`*) echo "no member at $DLOCK_LEADER_ENDPOINT" >&2; exit 1;; esac`)
	r := runCLI(t, "bench", "--capacity", "--dsn", "etcd://"+strings.Join(c.HostPorts(), ","),
		"--scenarios", "a,f", "--impls", "dlock", "--inflight", "4", "--failover-sessions", "20",
		"--runs", "1", "--procs", "2", "--ttl", "3s", "--duration", "1s", "--failover-cmd", script.String(), "--json")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stderr, "capacity: a inflight=4 dlock run 1/1")
	assert.Contains(t, r.stderr, "capacity: f sessions=20 dlock run 1/1")
	var rep capacity.Report
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), "stdout: %s", r.stdout)
	assert.Equal(t, 1, rep.Version)
	assert.Equal(t, 3, rep.Cluster.Members)
	assert.Equal(t, "cmd", rep.Config.Failover)
	require.Len(t, rep.Rows, 2)
	assert.Positive(t, rep.Rows[0].Metrics["grants_per_s"])
	f := rep.Rows[1]
	assert.Equal(t, "f", f.Scenario)
	assert.Positive(t, f.Metrics["time_to_first_grant_s"])
	assert.Positive(t, f.Metrics["all_renewed_s"])
	assert.Zero(t, f.Metrics["sessions_lost"])
	assert.Contains(t, f.Note, "--failover-cmd")
}
