package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StartTimeout bounds the startup of one server, after its binary was
// found: the wait until it answers HTTP.
const StartTimeout = 30 * time.Second

// stopTimeout bounds a graceful shutdown before the server is killed.
const stopTimeout = 10 * time.Second

// Region is the region every server reports and signs for.
const Region = "us-east-1"

// Server is a running versitygw process. Its methods are safe for
// concurrent use.
type Server struct {
	// Endpoint is the server's base URL, "http://127.0.0.1:<port>".
	Endpoint string
	// AccessKey and SecretKey are the root account's credentials.
	AccessKey, SecretKey string

	dir     string // temp dir: root/, meta/, versitygw.log
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd.Wait returns
	waitErr error         // valid after exited is closed

	stopOnce sync.Once
	stopErr  error

	mu      sync.Mutex
	buckets int
}

// StartServer finds (or builds, see Binary) versitygw and starts it with
// its posix backend on a new temporary directory, on a free loopback port.
// The caller must call Stop. Errors for a missing binary match
// ErrNotInstalled. ctx bounds the build and the startup.
func StartServer(ctx context.Context) (*Server, error) {
	bin, err := Binary(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "s3test-")
	if err != nil {
		return nil, fmt.Errorf("s3test: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, fmt.Errorf("s3test: %w", err)
	}
	var sidecar string
	if !xattrs(root) {
		sidecar = filepath.Join(dir, "meta")
		if err := os.Mkdir(sidecar, 0o755); err != nil {
			return nil, fmt.Errorf("s3test: %w", err)
		}
	}
	// A free port can be taken by someone else before the server binds
	// it: try a few.
	var lastErr error
	for range 3 {
		s, err := launch(ctx, bin, dir, root, sidecar)
		if err == nil {
			ok = true
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func launch(ctx context.Context, bin, dir, root, sidecar string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "versitygw.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("s3test: %w", err)
	}
	defer logf.Close() // the child keeps its own descriptor
	s := &Server{
		Endpoint:  "http://127.0.0.1:" + strconv.Itoa(port),
		AccessKey: "s3test-" + randomHex(4),
		SecretKey: randomHex(20),
		dir:       dir,
		logPath:   logPath,
		exited:    make(chan struct{}),
	}
	args := []string{
		"--port", "127.0.0.1:" + strconv.Itoa(port),
		"--access", s.AccessKey,
		"--secret", s.SecretKey,
		"--region", Region,
		"--keep-alive",
		"--quiet",
		"posix",
	}
	if sidecar != "" {
		args = append(args, "--sidecar", sidecar)
	}
	args = append(args, root)
	s.cmd = exec.Command(bin, args...)
	s.cmd.Dir = dir
	s.cmd.Env = childEnv()
	s.cmd.Stdout, s.cmd.Stderr = logf, logf // *os.File: no copying goroutine
	s.cmd.SysProcAttr = sysProcAttr()
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("s3test: start versitygw: %w", err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(ctx); err != nil {
		s.kill()
		return nil, fmt.Errorf("%w\n%s", err, s.logTail())
	}
	return s, nil
}

// waitReady polls until the server answers an HTTP request (any status: an
// anonymous request is refused), it exits, or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+"/", nil)
		if err != nil {
			return fmt.Errorf("s3test: %w", err)
		}
		resp, err := c.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("s3test: versitygw exited during startup: %v", s.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("s3test: versitygw not ready: %w (last error: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// Stop shuts the server down (SIGTERM, then SIGKILL after a bound) and
// removes its directory. It is idempotent.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(stopTimeout):
			s.stopErr = fmt.Errorf("s3test: versitygw did not stop within %v; killed", stopTimeout)
			s.kill()
		}
		if err := os.RemoveAll(s.dir); err != nil && s.stopErr == nil {
			s.stopErr = fmt.Errorf("s3test: %w", err)
		}
	})
	return s.stopErr
}

func (s *Server) kill() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// Exited reports whether the server process has ended.
func (s *Server) Exited() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// Env returns the environment variables ("KEY=value") that point an AWS
// SDK or CLI in a child process at s: endpoint, credentials and region,
// with the shared config and credentials files and the EC2 metadata
// service turned off, so that nothing on the machine (or off it) is
// consulted.
func (s *Server) Env() []string {
	return sdkEnv(s.Endpoint, s.AccessKey, s.SecretKey)
}

func sdkEnv(endpoint, access, secret string) []string {
	return []string{
		"AWS_ENDPOINT_URL=" + endpoint,
		"AWS_ACCESS_KEY_ID=" + access,
		"AWS_SECRET_ACCESS_KEY=" + secret,
		"AWS_SESSION_TOKEN=",
		"AWS_REGION=" + Region,
		"AWS_PROFILE=",
		"AWS_CONFIG_FILE=" + os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE=" + os.DevNull,
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

// nextBucket returns a new bucket name, unique on s.
func (s *Server) nextBucket() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buckets++
	return fmt.Sprintf("s3test-%d-%s", s.buckets, randomHex(3))
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return ""
	}
	return "versitygw log (tail):\n" + tail(b)
}

// childEnv is the server's environment: the test's own without the
// variables that versitygw reads as settings (VGW_*, ROOT_*), so that only
// the flags above configure it.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "VGW_") || strings.HasPrefix(kv, "ROOT_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("s3test: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
