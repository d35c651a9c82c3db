package cluster

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
	"github.com/dlock-go/dlock/integration/cluster/fault"
	"github.com/dlock-go/dlock/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runRedisCluster runs cfg with RunRedis under t, logging progress, and
// returns the report.
func runRedisCluster(t *testing.T, ctx context.Context, cfg env.Config) *Report {
	t.Helper()
	cfg.Dir = artifacts(t)
	rep, err := RunRedis(ctx, cfg, func(format string, args ...any) {
		t.Logf("%s "+format, append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	})
	if err != nil {
		t.Fatalf("run: %v (replay: DLOCK_SEED=%d go test -run '^%s$')", err, cfg.Seed, t.Name())
	}
	t.Logf("report:\n%s", rep)
	return rep
}

// TestSmokeRedis runs every Redis fault class twice, in a seeded order,
// against the Sentinel-backed Mutex and Redlock. Double grants, Done after
// a successor and token regressions are what the table measures; the run
// fails only if the fenced register admits a stale write, a fault cannot
// be injected, a workload makes no progress after a heal, a worker does
// not stop cleanly, or a lock key outlives the run.
func TestSmokeRedis(t *testing.T) {
	testenv.SkipUnlessLong(t, "~3 min: every Redis fault class against Sentinel and Redlock")
	env.Need(t)
	env.NeedRedis(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	rep := runRedisCluster(t, ctx, env.Config{Seed: seed(t, 20261206), Faults: 2 * len(fault.RedisClasses)})
	verdict(t, rep)
	for _, r := range rep.Rows {
		assert.NotZero(t, r.Grants, "%s: no grant at all", r.Workload)
		assert.Zero(t, r.Stale, "%s: the fenced register admitted stale writes", r.Workload)
	}
}

// TestSoakRedis is the long Redis run: DLOCK_SOAK_REDIS=30m (a duration)
// turns it on; DLOCK_SOAK_REDIS_REPLICAS=1 makes the redis workload's
// grants count only once the replica acknowledged them (replicas=1).
func TestSoakRedis(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("DLOCK_SOAK_REDIS"))
	if err != nil || d <= 0 {
		t.Skip("set DLOCK_SOAK_REDIS to a duration (30m) to run the Redis soak")
	}
	env.Need(t)
	env.NeedRedis(t)
	ctx, cancel := context.WithTimeout(t.Context(), d+15*time.Minute)
	defer cancel()
	per := 6
	if s := os.Getenv("DLOCK_SOAK_WORKERS"); s != "" {
		per, _ = strconv.Atoi(s)
	}
	replicas := 0
	if s := os.Getenv("DLOCK_SOAK_REDIS_REPLICAS"); s != "" {
		replicas, err = strconv.Atoi(s)
		require.NoError(t, err, "DLOCK_SOAK_REDIS_REPLICAS")
	}
	rep := runRedisCluster(t, ctx, env.Config{Seed: seed(t, 20261206), Duration: d, PerWorkload: per, RedisReplicas: replicas})
	verdict(t, rep)
}
