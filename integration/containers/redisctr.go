package containers

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	goredis "github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/dlock-go/dlock/internal/testenv"
)

// RedisContainer is a redis-server in a container of RedisImage, its port
// published on the Docker host, for faults the container runtime injects
// (docker pause, network disconnect). It is removed when the test ends.
type RedisContainer struct {
	c    *testcontainers.DockerContainer
	addr string
}

// StartRedis builds RedisImage if it is missing (see BuildRedis) and
// starts n containers of it, each answering PING. Without a Docker engine
// the test skips, or fails under DLOCK_REQUIRE (all, or "docker").
func StartRedis(t testing.TB, n int) []*RedisContainer {
	t.Helper()
	if ok, why := DockerAvailable(); !ok {
		testenv.Missing(t, "docker", why)
	}
	if _, ok := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); !ok {
		t.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true") // no registry for Ryuk's image
	}
	ctx, cancel := context.WithTimeout(t.Context(), BuildTimeout)
	defer cancel()
	if _, err := BuildRedis(ctx); err != nil {
		t.Fatalf("containers: %v", err)
	}
	out := make([]*RedisContainer, n)
	for i := range out {
		out[i] = startRedis(t, ctx)
	}
	return out
}

func startRedis(t testing.TB, ctx context.Context) *RedisContainer {
	t.Helper()
	gc, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{Image: RedisImage, ExposedPorts: []string{"6379/tcp"}},
		Started:          true,
		Logger:           tclog.TestLogger(t),
	})
	if gc != nil {
		t.Cleanup(func() {
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := gc.Terminate(cctx); err != nil && !errdefs.IsNotFound(err) {
				t.Errorf("containers: remove redis container: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatalf("containers: start %s: %v", RedisImage, err)
	}
	port, err := gc.MappedPort(ctx, "6379/tcp")
	if err != nil {
		t.Fatalf("containers: port of %s: %v", RedisImage, err)
	}
	host := "127.0.0.1"
	if h, ok := os.LookupEnv("TESTCONTAINERS_HOST_OVERRIDE"); ok && h != "localhost" {
		host = h
	}
	r := &RedisContainer{c: gc.(*testcontainers.DockerContainer), addr: net.JoinHostPort(host, port.Port())}
	c := goredis.NewClient(&goredis.Options{Addr: r.addr})
	defer c.Close()
	for {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return r
		}
		select {
		case <-ctx.Done():
			t.Fatalf("containers: %s on %s does not answer PING: %v", RedisImage, r.addr, err)
		case <-time.After(20 * time.Millisecond): // polling: no readiness event
		}
	}
}

// Addr returns the server's host:port on the Docker host.
func (r *RedisContainer) Addr() string { return r.addr }

// ID returns the container's ID, for docker pause, unpause, network
// disconnect.
func (r *RedisContainer) ID() string { return r.c.GetContainerID() }

func (r *RedisContainer) String() string { return fmt.Sprintf("%s (%s)", r.addr, r.ID()) }
