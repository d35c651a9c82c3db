package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
	"github.com/dlock-go/dlock/integration/cluster/fault"
	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// seed is DLOCK_SEED, or def.
func seed(t *testing.T, def int64) int64 {
	if s := os.Getenv("DLOCK_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("DLOCK_SEED=%q: %v", s, err)
		}
		return n
	}
	return def
}

// artifacts returns the run's directory: under DLOCK_ARTIFACTS if set
// (kept), else a temporary one kept only if the test fails.
func artifacts(t *testing.T) string {
	name := strings.ReplaceAll(t.Name(), "/", "-")
	if root := os.Getenv("DLOCK_ARTIFACTS"); root != "" {
		dir := filepath.Join(root, fmt.Sprintf("%s-%s", name, time.Now().Format("20060102-150405")))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	dir, err := os.MkdirTemp("", "dlock-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("artifacts kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

// beforeTimeout bounds ctx to end two minutes before go test's -timeout:
// a test that times out panics, and no cleanup runs (namespaces, mounts
// and processes would stay); a run whose context ends stops and cleans up.
func beforeTimeout(t *testing.T, ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := t.Deadline(); ok {
		return context.WithDeadline(ctx, dl.Add(-2*time.Minute))
	}
	return context.WithCancel(ctx)
}

// runCluster runs cfg under t, logging progress, and returns the report.
func runCluster(t *testing.T, ctx context.Context, cfg env.Config) *Report {
	t.Helper()
	cfg.EtcdBin = etcdtest.Binary(t)
	cfg.Dir = artifacts(t)
	ctx, cancel := beforeTimeout(t, ctx)
	defer cancel()
	rep, err := Run(ctx, cfg, func(format string, args ...any) {
		t.Logf("%s "+format, append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	})
	if err != nil {
		t.Fatalf("run: %v (replay: DLOCK_SEED=%d go test -run '^%s$')", err, cfg.Seed, t.Name())
	}
	t.Logf("report:\n%s", rep)
	return rep
}

// TestSmoke runs every etcd fault class once, in a seeded order, against
// all four workloads, and requires every checker to pass. The unfenced
// control must see double grants (the pause faults make them): a run that
// sees none is too gentle to count.
func TestSmoke(t *testing.T) {
	testenv.SkipUnlessLong(t, "~5 min: every etcd fault class against the four workloads")
	env.Need(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	rep := runCluster(t, ctx, env.Config{Seed: seed(t, 20261206), Faults: len(fault.EtcdClasses), Lossy: true})
	verdict(t, rep)
	double := 0
	for _, r := range rep.Rows {
		double += r.Double
		if r.Grants == 0 {
			t.Errorf("%s: no grant at all", r.Workload)
		}
	}
	if double == 0 {
		t.Errorf("the unfenced control saw no double grant: the run is too gentle to count")
	}
}

// TestSoak is the long run: DLOCK_SOAK=30m (a duration) turns it on;
// DLOCK_SOAK_GUARD=pg puts the fenced register behind that guard.
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("DLOCK_SOAK"))
	if err != nil || d <= 0 {
		t.Skip("set DLOCK_SOAK to a duration (30m) to run the soak")
	}
	env.Need(t)
	ctx, cancel := context.WithTimeout(t.Context(), d+15*time.Minute)
	defer cancel()
	per := 8
	if s := os.Getenv("DLOCK_SOAK_WORKERS"); s != "" {
		per, _ = strconv.Atoi(s)
	}
	members := 3
	if s := os.Getenv("DLOCK_SOAK_MEMBERS"); s != "" {
		members, _ = strconv.Atoi(s)
	}
	cfg := env.Config{Seed: seed(t, 20261206), Duration: d, Lossy: true, PerWorkload: per, Members: members}
	if guard := os.Getenv("DLOCK_SOAK_GUARD"); guard != "" {
		// The fenced register behind a guard (Guards), and the
		// resource-side faults beside etcd's.
		needGuard(t, guard)
		cfg.Guard = guard
		cfg.Classes = append(append([]string(nil), fault.EtcdClasses...), fault.ClassesFor(guard)...)
	}
	rep := runCluster(t, ctx, cfg)
	verdict(t, rep)
}

// verdict fails t with the report's failures, and says how to replay.
func verdict(t *testing.T, rep *Report) {
	t.Helper()
	for _, f := range rep.Failures {
		t.Error(f)
	}
	if t.Failed() {
		t.Logf("replay: DLOCK_SEED=%d go test -run '^%s$' (artifacts: %s; recheck: go run ./cmd/table %s)", rep.Seed, t.Name(), rep.Dir, rep.Dir)
	}
}

// TestNewFaults runs the cluster-level classes (leader transfer, a
// stalled disk, a member replaced) on 5 members, once each.
func TestNewFaults(t *testing.T) {
	testenv.SkipUnlessLong(t, "~1 min: leader transfer, a stalled disk, a member replaced")
	env.Need(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	classes := []string{"move-leader", "disk-stall", "member-replace"}
	if s := os.Getenv("DLOCK_NEW_FAULTS"); s != "" {
		classes = strings.Split(s, ",")
	}
	members := 5
	if s := os.Getenv("DLOCK_NEW_FAULTS_MEMBERS"); s != "" {
		members, _ = strconv.Atoi(s)
	}
	rep := runCluster(t, ctx, env.Config{Seed: seed(t, 20261207), Members: members, Faults: len(classes), Classes: classes, Lossy: true, Workloads: []string{"mutex", "semaphore"}})
	verdict(t, rep)
	for _, f := range rep.Faults {
		t.Logf("fault %d %s %v: %s", f.N, f.Class, f.Targets, f.Note)
	}
}
