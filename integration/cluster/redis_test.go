package cluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/internal/testenv"
)

// needRedis ends the test unless redis-server, redis-sentinel and gcc (for
// the fast-clock shim) are on PATH.
func needRedis(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-sentinel"} {
		if _, err := exec.LookPath(bin); err != nil {
			testenv.Missing(t, "redis", bin+" not found (apt-get install redis-server redis-sentinel)")
		}
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		testenv.Missing(t, "gcc", "gcc not found: the fast-clock shim is built with it (apt-get install gcc)")
	}
}

// runRedisCluster runs cfg with RunRedis under t, logging progress, and
// returns the report.
func runRedisCluster(t *testing.T, ctx context.Context, cfg Config) *Report {
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
	need(t)
	needRedis(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	rep := runRedisCluster(t, ctx, Config{Seed: seed(t, 20261206), Faults: 2 * len(RedisClasses)})
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
	need(t)
	needRedis(t)
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
	rep := runRedisCluster(t, ctx, Config{Seed: seed(t, 20261206), Duration: d, PerWorkload: per, RedisReplicas: replicas})
	verdict(t, rep)
}

// TestFastClockShim shows that redis-server's clock runs twice as fast
// under the shim: its TIME advances 2 s per real second, and a key set
// with PX 2000 expires after about 1 s of real time.
func TestFastClockShim(t *testing.T) {
	needRedis(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	so, err := BuildFastClock(dir)
	require.NoError(t, err)
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command("redis-server", "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	cmd.Env = append(os.Environ(), fastClockEnv(so, 2)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test binary
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	c := goredis.NewClient(&goredis.Options{Network: "unix", Addr: sock, MaxRetries: -1})
	defer c.Close()
	for c.Ping(ctx).Err() != nil {
		select {
		case <-ctx.Done():
			t.Fatalf("redis-server under the shim does not answer (log: %s)", filepath.Join(dir, "redis.log"))
		case <-time.After(20 * time.Millisecond):
		}
	}

	// TIME across a real second: the server's elapsed over the real one,
	// bracketed so that the round trips count against the factor.
	r0 := time.Now()
	s0, err := c.Time(ctx).Result()
	require.NoError(t, err)
	r1 := time.Now()
	time.Sleep(time.Second) // the interval measured, not a synchronisation
	r2 := time.Now()
	s1, err := c.Time(ctx).Result()
	require.NoError(t, err)
	r3 := time.Now()
	server := s1.Sub(s0).Seconds()
	factor := server / r3.Sub(r0).Seconds()
	factorHi := server / r2.Sub(r1).Seconds()
	t.Logf("fast clock: server TIME advanced %.3fs while %.3f–%.3fs passed: factor %.3f–%.3f", server, r2.Sub(r1).Seconds(), r3.Sub(r0).Seconds(), factor, factorHi)
	assert.InDelta(t, 2, factor, 0.1, "server clock factor (lower bound)")
	assert.InDelta(t, 2, factorHi, 0.1, "server clock factor (upper bound)")

	// A key's expiry follows the server's clock.
	require.NoError(t, c.Set(ctx, "k", "v", 2*time.Second).Err())
	set := time.Now()
	for c.Exists(ctx, "k").Val() == 1 {
		if time.Since(set) > 3*time.Second {
			t.Fatal("the PX 2000 key outlived 3s of real time")
		}
		time.Sleep(5 * time.Millisecond) // polling the key
	}
	life := time.Since(set)
	t.Logf("a PX 2000 key lived %v of real time", life.Round(time.Millisecond))
	assert.InDelta(t, time.Second.Seconds(), life.Seconds(), 0.15, "real lifetime of a PX 2000 key at factor 2")
}
