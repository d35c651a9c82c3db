package redistest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/dlock-go/dlock/internal/testenv"
)

// Defaults of the container mode, in one place.
const (
	// Image is the Redis image of the container mode. On a machine with a
	// registry it is pulled; without one it must have been built locally
	// (integration/containers.BuildRedis builds it under this name).
	Image = "redis:7.0.15"
	// PullTimeout bounds the one attempt to pull Image when it is missing.
	PullTimeout = 2 * time.Minute
	// containerPort is the server's port inside the container.
	containerPort = "6379/tcp"
	// dockerTimeout bounds each Docker API call other than a pull.
	dockerTimeout = time.Minute
	// pingAttempt bounds one PING, so that an address that does not answer
	// (a gateway that drops packets) cannot use up StartTimeout.
	pingAttempt = 500 * time.Millisecond
)

// containerArgs are the server's arguments in a container (the image's
// entrypoint is redis-server; the official image's entrypoint script also
// runs redis-server when the first argument starts with "-").
var containerArgs = []string{
	"--bind", "0.0.0.0",
	"--port", "6379",
	"--protected-mode", "no",
	"--save", "",
	"--appendonly", "no",
	"--maxmemory-policy", "noeviction",
	"--dir", "/tmp",
	"--loglevel", "warning",
}

// ryukOnce disables testcontainers' reaper (Ryuk), whose image cannot be
// pulled without a registry; every container is removed by t.Cleanup.
var ryukOnce sync.Once

func disableRyuk() {
	ryukOnce.Do(func() {
		if _, ok := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); !ok {
			_ = os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
		}
	})
}

// ctr is the container side of a Server. Its fields are set once by
// startContainer; the container's state is guarded by Server.mu.
type ctr struct {
	c   *testcontainers.DockerContainer
	cli *testcontainers.DockerClient
}

// startContainer starts the server in a container of Image, publishing its
// port on a fixed free host port so that it stays the same across
// Stop/Kill and Restart. why says why the process mode was not used.
func startContainer(t testing.TB, c config, why string) *Server {
	t.Helper()
	// The dependency is Docker when the caller asked for a container, Redis
	// when the container is a fallback for a missing binary.
	what := "redis"
	if c.container {
		what = "docker"
	}
	disableRyuk()
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err == nil {
		_, err = cli.Ping(ctx, client.PingOptions{})
		if err != nil {
			_ = cli.Close()
		}
	}
	if err != nil {
		testenv.Missing(t, what, fmt.Sprintf("%s; no Docker engine for the container fallback: %v", why, err))
		return nil
	}
	t.Cleanup(func() { _ = cli.Close() })
	if err := ensureImage(ctx, cli); err != nil {
		testenv.Missing(t, what, fmt.Sprintf("%s; image %s for the container fallback: %v", why, Image, err))
		return nil
	}

	s := &Server{t: t, host: "127.0.0.1", args: c.args, ctr: &ctr{cli: cli}}
	var lastErr error
	for range portAttempts {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: find a free port: %v", err)
		}
		s.port = port
		if lastErr = s.createContainer(t); lastErr == nil {
			return s
		}
	}
	t.Fatalf("redistest: start a %s container: %v", Image, lastErr)
	return nil
}

// ensureImage makes sure Image is present, trying one pull (bounded by
// PullTimeout) if it is not.
func ensureImage(ctx context.Context, cli *testcontainers.DockerClient) error {
	_, err := cli.ImageInspect(ctx, Image)
	if err == nil {
		return nil
	}
	if !errdefs.IsNotFound(err) {
		return fmt.Errorf("inspect: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, PullTimeout)
	defer cancel()
	resp, err := cli.ImagePull(pctx, Image, client.ImagePullOptions{})
	if err != nil {
		return fmt.Errorf("not present and pull failed: %w", err)
	}
	defer resp.Close()
	if err := resp.Wait(pctx); err != nil {
		return fmt.Errorf("not present and pull failed: %w", err)
	}
	return nil
}

// createContainer creates and starts the container on s.port and waits for
// PING; on failure the container is removed.
func (s *Server) createContainer(t testing.TB) error {
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	hostPort := strconv.Itoa(s.port)
	req := testcontainers.ContainerRequest{
		Image:        Image,
		Cmd:          append(append([]string(nil), containerArgs...), s.args...),
		ExposedPorts: []string{containerPort},
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				network.MustParsePort(containerPort): {{HostPort: hostPort}},
			}
		},
	}
	gc, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: req,
		Started:          true,
		Logger:           tclog.TestLogger(t),
	})
	var dc *testcontainers.DockerContainer
	if gc != nil {
		dc = gc.(*testcontainers.DockerContainer)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctr.c = dc
	if err == nil {
		err = s.waitContainer(ctx)
	}
	if err != nil {
		s.terminate()
		return err
	}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.terminate()
	})
	return nil
}

// waitContainer waits until the server answers PING on the published port,
// and picks the host it answers on: the Docker host testcontainers reports
// (TESTCONTAINERS_HOST_OVERRIDE if set) or else 127.0.0.1, since inside a
// container testcontainers reports the bridge gateway, which may not
// answer. s.mu must be held.
func (s *Server) waitContainer(ctx context.Context) error {
	hosts := []string{"127.0.0.1"}
	if h, err := s.ctr.c.Host(ctx); err == nil && h != "localhost" && h != "127.0.0.1" {
		if _, set := os.LookupEnv("TESTCONTAINERS_HOST_OVERRIDE"); set {
			hosts = []string{h}
		} else {
			hosts = []string{h, "127.0.0.1"}
		}
	}
	addrs := make([]string, len(hosts))
	for i, h := range hosts {
		addrs[i] = net.JoinHostPort(h, strconv.Itoa(s.port))
	}
	wctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	i, err := waitPingAny(wctx, addrs)
	if err != nil {
		return fmt.Errorf("%w; logs: %s", err, s.containerLogs(ctx))
	}
	s.host = hosts[i]
	return nil
}

// waitPingAny dials each of addrs in turn, each attempt bounded by
// pingAttempt, until one answers PING or ctx ends; it returns the index of
// the one that answered.
func waitPingAny(ctx context.Context, addrs []string) (int, error) {
	retry := time.NewTicker(10 * time.Millisecond)
	defer retry.Stop()
	var lastErr error
	for {
		for i, a := range addrs {
			actx, cancel := context.WithTimeout(ctx, pingAttempt)
			lastErr = ping(actx, a, nil)
			cancel()
			if lastErr == nil {
				return i, nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no PONG from %s: %w (last error: %v)", strings.Join(addrs, " or "), ctx.Err(), lastErr)
		case <-retry.C:
		}
	}
}

func (s *Server) containerLogs(ctx context.Context) string {
	rc, err := s.ctr.c.Logs(ctx)
	if err != nil {
		return err.Error()
	}
	defer rc.Close()
	b, _ := io.ReadAll(io.LimitReader(rc, 64<<10))
	return strings.TrimSpace(string(b))
}

// terminate removes the container. s.mu must be held.
func (s *Server) terminate() {
	if s.ctr.c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	if err := s.ctr.c.Terminate(ctx); err != nil && !errdefs.IsNotFound(err) {
		s.t.Errorf("redistest: remove container %s: %v", s.ctr.c.GetContainerID(), err)
	}
	s.ctr.c = nil
}

// containerRunning reports whether the container is running. s.mu must be
// held.
func (s *Server) containerRunning(ctx context.Context) (bool, error) {
	if s.ctr.c == nil {
		return false, nil
	}
	res, err := s.ctr.cli.ContainerInspect(ctx, s.ctr.c.GetContainerID(), client.ContainerInspectOptions{})
	if err != nil {
		return false, err
	}
	return res.Container.State != nil && res.Container.State.Running, nil
}

// killContainer sends SIGKILL to the container and waits until it is not
// running. s.mu must be held.
func (s *Server) killContainer() {
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	running, err := s.containerRunning(ctx)
	if err != nil {
		s.t.Errorf("redistest: kill: inspect: %v", err)
		return
	}
	if !running {
		return
	}
	id := s.ctr.c.GetContainerID()
	if _, err := s.ctr.cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		s.t.Errorf("redistest: kill container %s: %v", id, err)
		return
	}
	s.waitNotRunning(ctx)
}

// stopContainer stops the container (SIGTERM, SIGKILL after stopTimeout).
// s.mu must be held.
func (s *Server) stopContainer() {
	if s.ctr.c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	grace := stopTimeout
	if err := s.ctr.c.Stop(ctx, &grace); err != nil {
		s.t.Errorf("redistest: stop container %s: %v", s.ctr.c.GetContainerID(), err)
		return
	}
	s.waitNotRunning(ctx)
}

func (s *Server) waitNotRunning(ctx context.Context) {
	id := s.ctr.c.GetContainerID()
	w := s.ctr.cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-w.Result:
	case err := <-w.Error:
		s.t.Errorf("redistest: wait for container %s to exit: %v", id, err)
	}
}

// restartContainer starts the stopped container again; the published port
// is the same. s.mu must be held.
func (s *Server) restartContainer() error {
	if s.ctr.c == nil {
		return errors.New("container removed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), dockerTimeout)
	defer cancel()
	if err := s.ctr.c.Start(ctx); err != nil {
		return err
	}
	return s.waitContainer(ctx)
}
