package redistest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/integration/tlstest"
	"github.com/dlock-go/dlock/internal/testenv"
)

// Defaults, in one place.
const (
	// Binary is the redis-server executable looked up on PATH.
	Binary = "redis-server"
	// StartTimeout bounds how long Start and Restart wait for the server to
	// answer PING.
	StartTimeout = 10 * time.Second
	// stopTimeout bounds how long Stop waits for a graceful exit before it
	// kills the process.
	stopTimeout = 5 * time.Second
	// portAttempts is how many fresh ports Start tries.
	portAttempts = 5
)

// Option configures a Server.
type Option func(*config)

type config struct {
	args []string
	tls  *tlstest.Certs
	conf string // sentinel mode: the config file, written before the start
}

// WithArgs appends redis-server command-line arguments, for example
// WithArgs("--replicaof", "127.0.0.1", "6379"). Optional, defaults to none.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithTLS makes the server speak TLS only, with the certificates of certs:
// its port is a TLS port (tls-port; the plaintext port is off), clients
// may present a certificate signed by certs' CA (tls-auth-clients
// optional), and Client, Config and the start's PING use TLS. Optional,
// defaults to plaintext.
func WithTLS(certs *tlstest.Certs) Option {
	return func(c *config) { c.tls = certs }
}

// Server is one redis-server, a process on a loopback port. Its methods
// are safe for concurrent use. The process is killed when the test that
// started it ends.
type Server struct {
	t    testing.TB
	host string // the address's host: 127.0.0.1
	port int
	dir  string
	args []string
	tls  *tlstest.Certs // nil: plaintext
	conf string         // sentinel mode: the config file

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	out    *syncBuffer
}

// Start starts a redis-server process on a free loopback port and waits
// until it answers PING. It skips the test (or fails it, under
// DLOCK_REQUIRE) if redis-server is not on PATH, and fails it if the
// server does not come up. (Redis in a container, for faults the container
// runtime injects: integration/containers.StartRedis.)
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var c config
	for _, o := range opts {
		o(&c)
	}
	path, err := exec.LookPath(Binary)
	if err != nil {
		testenv.Missing(t, "redis", fmt.Sprintf("%s not found on PATH: %v", Binary, err))
		return nil
	}
	s := &Server{t: t, host: "127.0.0.1", dir: t.TempDir(), args: c.args, tls: c.tls}
	if c.conf != "" {
		s.conf = filepath.Join(s.dir, "sentinel.conf")
	}
	t.Cleanup(s.Kill)
	var lastErr error
	for range portAttempts {
		port, err := freePort()
		if err != nil {
			t.Fatalf("redistest: find a free port: %v", err)
		}
		s.port = port
		if s.conf != "" {
			// Sentinel rewrites its config file: write it afresh per try.
			if err := os.WriteFile(s.conf, []byte(c.conf), 0o600); err != nil {
				t.Fatalf("redistest: write %s: %v", s.conf, err)
			}
		}
		if lastErr = s.start(path); lastErr == nil {
			return s
		}
	}
	t.Fatalf("redistest: start %s: %v", Binary, lastErr)
	return nil
}

// StartN starts n independent servers (Redlock wants 5).
func StartN(t testing.TB, n int, opts ...Option) []*Server {
	t.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = Start(t, opts...)
	}
	return servers
}

// Clients returns one client per server, each closed when the test ends.
func Clients(t testing.TB, servers []*Server) []goredis.UniversalClient {
	t.Helper()
	clients := make([]goredis.UniversalClient, len(servers))
	for i, s := range servers {
		clients[i] = s.Client(t)
	}
	return clients
}

// Addr returns the server's "host:port" address, "127.0.0.1:port". It
// stays the same across Restart.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr()
}

// addr is Addr with s.mu held.
func (s *Server) addr() string { return net.JoinHostPort(s.host, strconv.Itoa(s.port)) }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// Client returns a new client for the server, closed when t ends. It
// honours ctx deadlines (ContextTimeoutEnabled), so a test's deadline
// bounds every command; DefaultClient returns one with go-redis' defaults.
func (s *Server) Client(t testing.TB) goredis.UniversalClient {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, TLSConfig: s.TLSConfig()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// DefaultClient returns a new client for the server with go-redis' default
// options, as most applications build it: ContextTimeoutEnabled is false,
// so go-redis ignores ctx deadlines on reads and writes and waits for its
// ReadTimeout (5s) instead. It is closed when t ends.
func (s *Server) DefaultClient(t testing.TB) goredis.UniversalClient {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), TLSConfig: s.TLSConfig()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TLSConfig returns the client TLS configuration for a WithTLS server (it
// trusts the CA and presents the client certificate), or nil.
func (s *Server) TLSConfig() *tls.Config {
	if s.tls == nil {
		return nil
	}
	return s.tls.ClientConfig()
}

// Config sets a server parameter with CONFIG SET, failing the test on error.
func (s *Server) Config(key, value string) {
	s.t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, TLSConfig: s.TLSConfig()})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := c.ConfigSet(ctx, key, value).Err(); err != nil {
		s.t.Fatalf("redistest: CONFIG SET %s %s on %s: %v", key, value, s.Addr(), err)
	}
}

// Kill stops the server at once with SIGKILL and waits for it to exit, like
// a crash. It is a no-op if the server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signalAndWait(syscall.SIGKILL, 0)
}

// Stop stops the server with SIGTERM (a clean shutdown; nothing is saved)
// and waits for it to exit, killing it after a bounded wait. It is a no-op
// if the server is not running.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signalAndWait(syscall.SIGTERM, stopTimeout)
}

// Pause stops the server process with SIGSTOP: it keeps its connections,
// its data and its place, and
// answers nothing (the kernel still accepts connections and buffers what
// clients send) until Resume, like a stalled VM or a long GC pause. Kill
// (and the end of the test) ends a paused server too.
func (s *Server) Pause() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("redistest: pause: the server is not running")
	}
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("redistest: pause: SIGSTOP: %v", err)
	}
}

// Resume continues a server stopped by Pause (SIGCONT). It is a no-op on a
// running server.
func (s *Server) Resume() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Restart kills the server if it is running and starts it again, empty, on
// the same port, failing the test if it does not come up.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	path, err := exec.LookPath(Binary)
	if err != nil {
		s.t.Fatalf("redistest: restart: %v", err)
	}
	// The port was just released; another process could bind it in
	// between, so try a few times on the same port.
	var lastErr error
	for range portAttempts {
		if lastErr = s.start(path); lastErr == nil {
			return
		}
	}
	s.t.Fatalf("redistest: restart %s on port %d: %v", Binary, s.port, lastErr)
}

// Running reports whether the server process is running.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exited == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

func (s *Server) start(path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var args []string
	if s.conf != "" {
		args = append(args, s.conf, "--sentinel")
	}
	if s.tls != nil {
		args = append(args,
			"--port", "0",
			"--tls-port", strconv.Itoa(s.port),
			"--tls-cert-file", s.tls.ServerCert,
			"--tls-key-file", s.tls.ServerKey,
			"--tls-ca-cert-file", s.tls.CA,
			"--tls-auth-clients", "optional",
		)
	} else {
		args = append(args, "--port", strconv.Itoa(s.port))
	}
	args = append(args,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--maxmemory-policy", "noeviction",
		"--dir", s.dir,
		"--daemonize", "no",
		"--loglevel", "warning",
	)
	args = append(args, s.args...)
	cmd := exec.Command(path, args...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited, s.out = cmd, exited, out

	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := waitPing(ctx, s.addr(), s.TLSConfig(), exited); err != nil {
		s.signalAndWait(syscall.SIGKILL, 0)
		return fmt.Errorf("%w; output: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// signalAndWait sends sig and waits for the exit; if grace > 0 and the
// process is still running after it, it is killed. s.mu must be held.
func (s *Server) signalAndWait(sig syscall.Signal, grace time.Duration) {
	if s.cmd == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(sig)
	if grace > 0 {
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-s.exited:
			return
		case <-timer.C:
			_ = s.cmd.Process.Kill()
		}
	}
	<-s.exited
}

// waitPing dials addr until it answers PING with PONG, the process exits,
// or ctx ends.
func waitPing(ctx context.Context, addr string, tc *tls.Config, exited <-chan struct{}) error {
	retry := time.NewTicker(10 * time.Millisecond)
	defer retry.Stop()
	var lastErr error
	for {
		if lastErr = ping(ctx, addr, tc); lastErr == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("redis-server exited during start")
		case <-ctx.Done():
			return fmt.Errorf("no PONG from %s: %w (last error: %v)", addr, ctx.Err(), lastErr)
		case <-retry.C:
		}
	}
}

// ping sends PING to addr, over TLS if tc is not nil.
func ping(ctx context.Context, addr string, tc *tls.Config) error {
	var conn net.Conn
	var err error
	if tc != nil {
		d := tls.Dialer{Config: tc}
		conn, err = d.DialContext(ctx, "tcp", addr)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a child's
// stdout and stderr.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
