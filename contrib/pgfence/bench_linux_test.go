package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	osexec "os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock/contrib/pgfence"
	"github.com/dlock-go/dlock/integration/pgtest"
	"github.com/dlock-go/dlock/intent"
	"github.com/dlock-go/dlock/intent/intenttest"
)

// BenchmarkJournalDo measures what the journal adds to a call: a bare call
// to an HTTP server on loopback, against the same call through
// intent.Journal.Do on an IntentStore, one grant throughout, after a warm-up.
// Do commits two transactions (the intent, the outcome), each one round
// trip.
//
//   - journal=postgres: a server of the benchmark's own with PostgreSQL's
//     default durability (fsync, synchronous_commit, full_page_writes on),
//     its data directory on the temp dir's disk.
//   - journal=postgres-nofsync: the tests' shared server (pgtest), which
//     runs with fsync and synchronous_commit off: the cost without the
//     disk.
func BenchmarkJournalDo(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	call := func(ctx context.Context, key string) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		req.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	h := intenttest.NewHeld("bench/intent", 1)

	b.Run("bare", func(b *testing.B) {
		for b.Loop() {
			if err := call(ctx, "k"); err != nil {
				b.Fatal(err)
			}
		}
	})
	journal := func(server func(testing.TB) string, fsync string) func(b *testing.B) {
		return func(b *testing.B) {
			pool, err := pgxpool.New(ctx, server(b))
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			var got string
			if err := pool.QueryRow(ctx, `SELECT current_setting('fsync') || ',' || current_setting('synchronous_commit')`).Scan(&got); err != nil {
				b.Fatal(err)
			}
			if got != fsync {
				b.Fatalf("fsync,synchronous_commit = %s, want %s", got, fsync)
			}
			s, err := pgfence.NewIntentStore(pool)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Migrate(ctx); err != nil {
				b.Fatal(err)
			}
			j := intent.New(s)
			op := b.Name() + "/"
			i := 0
			// Warm up: the pool's connections, their prepared statements,
			// the server's caches. b.Loop starts the timer afterwards.
			for ; i < warmup; i++ {
				if err := j.Do(ctx, h, op+strconv.Itoa(i), call); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				i++
				if err := j.Do(ctx, h, op+strconv.Itoa(i), call); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("journal=postgres", journal(durableServer, "on,on"))
	b.Run("journal=postgres-nofsync", journal(pgtest.NewDatabase, "off,off"))
}

// warmup is how many Do calls precede the timed ones.
const warmup = 200

// durableServer starts a PostgreSQL server with the default durability
// settings for tb, and returns the DSN of its postgres database. pgtest's
// servers run with fsync off, which would leave the commits' cost out. The
// binaries are found as pgtest finds them; a missing one skips b.
func durableServer(b testing.TB) string {
	b.Helper()
	bin := postgresBin()
	if bin == "" {
		b.Skip("postgresql binaries not found (PGTEST_BIN, PATH, /usr/lib/postgresql/*/bin)")
	}
	dir, err := os.MkdirTemp("", "pgfence-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			b.Skipf("running as root without a postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			b.Fatal(err)
		}
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	}
	env := append(os.Environ(), "LC_ALL=C", "LANG=C")
	data := filepath.Join(dir, "data")
	initdb := osexec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "--no-locale", "-E", "UTF8")
	initdb.SysProcAttr, initdb.Env = attr, env
	if out, err := initdb.CombinedOutput(); err != nil {
		b.Fatalf("initdb: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	cmd := osexec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1")
	cmd.SysProcAttr, cmd.Env, cmd.Stdout, cmd.Stderr = attr, env, logf, logf
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		pool, err := pgxpool.New(ctx, dsn)
		if err == nil {
			err = pool.Ping(ctx)
			pool.Close()
		}
		if err == nil {
			return dsn
		}
		select {
		case werr := <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			b.Fatalf("postgres exited: %v\n%s", errors.Join(werr, err), log)
		case <-ctx.Done():
			b.Fatalf("postgres not ready: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// postgresBin returns the directory of initdb and postgres, or "".
func postgresBin() string {
	has := func(d string) bool {
		_, err1 := os.Stat(filepath.Join(d, "initdb"))
		_, err2 := os.Stat(filepath.Join(d, "postgres"))
		return err1 == nil && err2 == nil
	}
	if d := os.Getenv("PGTEST_BIN"); d != "" {
		if has(d) {
			return d
		}
		return ""
	}
	if p, err := osexec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil && has(filepath.Dir(r)) {
			return filepath.Dir(r)
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(d string) int { v, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return v }
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		if has(d) {
			return d
		}
	}
	return ""
}
