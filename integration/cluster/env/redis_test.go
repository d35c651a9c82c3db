package env

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFastClockShim shows that redis-server's clock runs twice as fast
// under the shim: its TIME advances 2 s per real second, and a key set
// with PX 2000 expires after about 1 s of real time.
func TestFastClockShim(t *testing.T) {
	NeedRedis(t)
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
