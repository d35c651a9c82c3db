package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartTimeout bounds the startup of one server: initdb plus the wait until
// it accepts connections.
const StartTimeout = 60 * time.Second

// stopTimeout bounds a fast shutdown before the server is killed.
const stopTimeout = 30 * time.Second

// Superuser is the name of the superuser of every server (trust
// authentication, no password).
const Superuser = "postgres"

// ErrNotInstalled is returned by StartServer when the PostgreSQL binaries
// (initdb, postgres) cannot be found.
var ErrNotInstalled = errors.New("pgtest: postgresql binaries not found")

// Server is a running PostgreSQL server. Its methods are safe for concurrent
// use.
type Server struct {
	// Host is the loopback address the server listens on ("127.0.0.1").
	Host string
	// Port is the TCP port the server listens on.
	Port int
	// SocketDir is the directory holding the server's Unix socket.
	SocketDir string

	dir     string // temp dir: data/, sock/, postgres.log
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd.Wait returns
	waitErr error         // valid after exited is closed

	stopOnce sync.Once
	stopErr  error

	mu  sync.Mutex
	dbs int // databases created so far, for unique names
}

// DSN returns a connection string for database db as the superuser, over
// TCP, with sslmode=disable.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", Superuser, net.JoinHostPort(s.Host, strconv.Itoa(s.Port)), db)
}

// StartServer initialises a new cluster in a temporary directory and starts a
// server on a free loopback port. The caller must call Stop. It returns an
// error matching ErrNotInstalled when the binaries are missing. ctx bounds
// the startup, together with StartTimeout.
func StartServer(ctx context.Context) (*Server, error) {
	bin, err := findBinDir()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()

	cred, uid, gid, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	dataDir := filepath.Join(dir, "data")
	sockDir := filepath.Join(dir, "sock")
	if err := os.Mkdir(sockDir, 0o700); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if cred != nil {
		// The server user must own its directories; /tmp itself is
		// world-traversable.
		for _, d := range []string{dir, sockDir} {
			if err := os.Chown(d, uid, gid); err != nil {
				return nil, fmt.Errorf("pgtest: chown %s: %w", d, err)
			}
		}
	}

	var out bytes.Buffer
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
		"-D", dataDir, "-U", Superuser, "--auth=trust", "--no-sync", "--no-locale", "-E", "UTF8")
	initdb.SysProcAttr = sysProcAttr(cred)
	initdb.Env = childEnv()
	initdb.Stdout, initdb.Stderr = &out, &out
	if err := initdb.Run(); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %w\n%s", err, out.Bytes())
	}

	logPath := filepath.Join(dir, "postgres.log")
	// A free port can be taken by someone else before the server binds it:
	// try a few.
	var lastErr error
	for range 3 {
		s, err := launch(ctx, bin, dir, dataDir, sockDir, logPath, cred)
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

func launch(ctx context.Context, bin, dir, dataDir, sockDir, logPath string, cred *syscall.Credential) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	defer logf.Close() // the child keeps its own descriptor
	cmd := exec.Command(filepath.Join(bin, "postgres"),
		"-D", dataDir,
		"-p", strconv.Itoa(port),
		"-k", sockDir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=200",
		"-c", "shared_buffers=32MB",
	)
	cmd.Dir = dir
	cmd.Env = childEnv()
	cmd.Stdout, cmd.Stderr = logf, logf // *os.File: no copying goroutine
	cmd.SysProcAttr = sysProcAttr(cred)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgtest: start postgres: %w", err)
	}
	s := &Server{
		Host:      "127.0.0.1",
		Port:      port,
		SocketDir: sockDir,
		dir:       dir,
		logPath:   logPath,
		cmd:       cmd,
		exited:    make(chan struct{}),
	}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	if err := s.waitReady(ctx); err != nil {
		s.kill()
		return nil, fmt.Errorf("%w\n%s", err, s.logTail())
	}
	return s, nil
}

// waitReady polls until the server accepts a connection, it exits, or ctx
// ends.
func (s *Server) waitReady(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(attempt, s.DSN("postgres"))
		cancel()
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("pgtest: postgres exited during startup: %v", s.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("pgtest: postgres not ready: %w (last error: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// Stop shuts the server down (fast shutdown, then kill after a bound) and
// removes its directory. It is idempotent.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-s.exited:
		case <-time.After(stopTimeout):
			s.stopErr = fmt.Errorf("pgtest: postgres did not stop within %v; killed", stopTimeout)
			s.kill()
		}
		if err := os.RemoveAll(s.dir); err != nil && s.stopErr == nil {
			s.stopErr = fmt.Errorf("pgtest: %w", err)
		}
	})
	return s.stopErr
}

func (s *Server) kill() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

// CreateDatabase creates a new empty database with a unique name and
// returns its name.
func (s *Server) CreateDatabase(ctx context.Context) (string, error) {
	s.mu.Lock()
	s.dbs++
	name := fmt.Sprintf("test_%d", s.dbs)
	s.mu.Unlock()
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgtest: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	return name, nil
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return ""
	}
	const max = 4 << 10
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return "postgres log (tail):\n" + string(b)
}

// findBinDir returns the directory holding initdb and postgres.
func findBinDir() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if d := os.Getenv("PGTEST_BIN"); d != "" {
		if has(d) {
			return d, nil
		}
		return "", fmt.Errorf("%w in PGTEST_BIN=%s", ErrNotInstalled, d)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		// Resolve symlinks so that initdb finds its sibling postgres.
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		if d := filepath.Dir(p); has(d) {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return versionOf(b) - versionOf(a) })
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w (looked on PATH and in /usr/lib/postgresql/*/bin)", ErrNotInstalled)
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// runAs returns the credential to run the server with: nil unless the test
// runs as root, then the "postgres" user or, failing that, "nobody".
func runAs() (*syscall.Credential, int, int, error) {
	if os.Geteuid() != 0 {
		return nil, os.Getuid(), os.Getgid(), nil
	}
	var u *user.User
	var err error
	for _, name := range []string{"postgres", "nobody"} {
		if u, err = user.Lookup(name); err == nil {
			break
		}
	}
	if err != nil {
		return nil, 0, 0, fmt.Errorf("pgtest: running as root and no unprivileged user (postgres, nobody) to run the server: %w", err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return nil, 0, 0, fmt.Errorf("pgtest: user %s: %w", u.Username, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, uid, gid, nil
}

// childEnv is the environment of initdb and postgres: the test's own,
// without PG* variables that could point them elsewhere, with a C locale.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if len(kv) >= 2 && kv[:2] == "PG" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "LANG=C")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
