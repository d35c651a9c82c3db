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

	"github.com/dlock-go/dlock/internal/testenv"
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
// (initdb, postgres, psql) cannot be found.
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

	dir  string // temp dir: data/, sock/, postgres.log
	bin  string // the directory of initdb, postgres, psql
	proc *testenv.Proc

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
func StartServer(ctx context.Context) (*Server, error) { return startServer(ctx, false) }

// StartDurableServer is StartServer with PostgreSQL's default durability
// (fsync, synchronous_commit and full_page_writes on): for benchmarks of
// what a commit costs.
func StartDurableServer(ctx context.Context) (*Server, error) { return startServer(ctx, true) }

func startServer(ctx context.Context, durable bool) (*Server, error) {
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

	s, err := testenv.Launch(ctx, func(port int) (*Server, error) {
		return launch(ctx, bin, dir, dataDir, sockDir, port, cred, durable)
	})
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	ok = true
	return s, nil
}

func launch(ctx context.Context, bin, dir, dataDir, sockDir string, port int, cred *syscall.Credential, durable bool) (*Server, error) {
	args := []string{
		"-D", dataDir,
		"-p", strconv.Itoa(port),
		"-k", sockDir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "max_connections=200",
		"-c", "shared_buffers=32MB",
	}
	if !durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.Dir = dir
	cmd.Env = childEnv()
	cmd.SysProcAttr = sysProcAttr(cred)
	proc, err := testenv.StartProc("postgres", cmd, filepath.Join(dir, "postgres.log"))
	if err != nil {
		return nil, err
	}
	s := &Server{Host: "127.0.0.1", Port: port, SocketDir: sockDir, dir: dir, bin: bin, proc: proc}
	// Ready once it accepts a connection to the postgres database.
	if err := proc.WaitReady(ctx, 50*time.Millisecond, func(ctx context.Context) error {
		_, err := s.psql(ctx, "postgres", "SELECT 1")
		return err
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// Stop shuts the server down (fast shutdown, then kill after a bound) and
// removes its directory. It is idempotent.
func (s *Server) Stop() error {
	err := s.proc.Stop(syscall.SIGINT, stopTimeout) // SIGINT: fast shutdown
	if rerr := os.RemoveAll(s.dir); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

// Query runs sql on database db as the superuser, with psql, and returns
// what it printed: the rows unaligned, without headers, one per line, and
// the values separated by "|". A bound of 30 seconds is added to ctx.
func (s *Server) Query(ctx context.Context, db, sql string) (string, error) {
	out, err := s.psql(ctx, db, sql)
	if err != nil {
		return "", fmt.Errorf("pgtest: %w", err)
	}
	return out, nil
}

func (s *Server) psql(ctx context.Context, db, sql string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, "psql"),
		"-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql, s.DSN(db))
	cmd.Env = childEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("psql %q: %w: %s", sql, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return string(bytes.TrimSuffix(out, []byte("\n"))), nil
}

// CreateDatabase creates a new empty database with a unique name and
// returns its name.
func (s *Server) CreateDatabase(ctx context.Context) (string, error) {
	s.mu.Lock()
	s.dbs++
	name := fmt.Sprintf("test_%d", s.dbs)
	s.mu.Unlock()
	if _, err := s.Query(ctx, "postgres", "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	return name, nil
}

// findBinDir returns the directory holding initdb and postgres.
func findBinDir() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres", "psql"} {
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
