package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/testenv"
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

	dir  string // temp dir: root/, meta/, versitygw.log
	proc *testenv.Proc

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
	if !testenv.Xattrs(root) {
		sidecar = filepath.Join(dir, "meta")
		if err := os.Mkdir(sidecar, 0o755); err != nil {
			return nil, fmt.Errorf("s3test: %w", err)
		}
	}
	s, err := testenv.Launch(ctx, func(port int) (*Server, error) {
		return launch(ctx, bin, dir, root, sidecar, port)
	})
	if err != nil {
		return nil, fmt.Errorf("s3test: %w", err)
	}
	ok = true
	return s, nil
}

func launch(ctx context.Context, bin, dir, root, sidecar string, port int) (*Server, error) {
	s := &Server{
		Endpoint:  "http://127.0.0.1:" + strconv.Itoa(port),
		AccessKey: "s3test-" + randomHex(4),
		SecretKey: randomHex(20),
		dir:       dir,
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
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = childEnv()
	cmd.SysProcAttr = sysProcAttr()
	var err error
	if s.proc, err = testenv.StartProc("versitygw", cmd, filepath.Join(dir, "versitygw.log")); err != nil {
		return nil, err
	}
	// Ready once it answers an HTTP request (any status: an anonymous
	// request is refused).
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	if err := s.proc.WaitReady(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+"/", nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// Stop shuts the server down (SIGTERM, then SIGKILL after a bound) and
// removes its directory. It is idempotent.
func (s *Server) Stop() error {
	err := s.proc.Stop(syscall.SIGTERM, stopTimeout)
	if rerr := os.RemoveAll(s.dir); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("s3test: %w", err)
	}
	return nil
}

// Exited reports whether the server process has ended.
func (s *Server) Exited() bool { return s.proc.Exited() }

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

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
