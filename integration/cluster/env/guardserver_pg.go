package env

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/contrib/pgfence"
	"github.com/dlock-go/dlock/integration/cluster/history"
	"github.com/jackc/pgx/v5"
)

// Guards are the guards a run can put in front of the fenced register
// (Config.Guard): the register is then a row of a real server, written
// by the workers through the guard users deploy.
var Guards = []string{"pg", "redis", "http", "grpc", "s3"}

// GuardServer is a guard's server, run by the harness in the resource's
// namespace.
type GuardServer interface {
	DSN() string                       // what the workers' -guard-dsn is
	Start(ctx context.Context) error   // (re)start it from its data, and wait until it serves
	Kill()                             // SIGKILL every process of it
	Signal(sig syscall.Signal) error   // SIGSTOP, SIGCONT every process of it
	Collect(ctx context.Context) error // write audit.jsonl and control.json into the run's directory
}

// pgPort is the PostgreSQL server's port on the resource's host.
const pgPort = 5432

// The tables of a pg run, in the database "postgres". register holds,
// per lock, the fenced register's value v (written through pgfence) and
// the control's counter ctl (read and written without it); audit gets one
// row per fenced write, in the write's transaction: what the guard
// admitted, in the order it committed them (the fence row's lock orders
// a lock's writes, and id is drawn while it is held).
const pgSchema = `
CREATE TABLE IF NOT EXISTS register (lock text PRIMARY KEY, v bigint NOT NULL DEFAULT 0, ctl bigint NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS audit (id bigserial PRIMARY KEY, lock text NOT NULL, tok bigint NOT NULL, v bigint NOT NULL, t bigint NOT NULL);`

// PG is a guard run's PostgreSQL server: it runs in the resource's
// namespace (the workers reach it only through the bridge, so network
// faults can cut it), as the unprivileged user postgres, with its data
// directory in a temporary directory of its own, fsync and synchronous
// commit on: an acknowledged commit survives a SIGKILL of the server.
type PG struct {
	Host *Host
	h    *Harness
	bin  string // the directory of initdb and postgres
	dir  string // data/, sock/; removed by Close
	uid  int
	gid  int

	serverProc
}

// serverProc is a guard server's process, replaced at each (re)start.
type serverProc struct {
	mu   sync.Mutex
	proc *Proc
}

// started registers p, just started, with h (which kills it at Close) as
// the server's process.
func (s *serverProc) started(h *Harness, p *Proc) error {
	if !h.track(p) {
		return errors.New("harness closed")
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return nil
}

func (s *serverProc) current() *Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// Kill SIGKILLs the server and waits until it is reaped.
func (s *serverProc) Kill() {
	if p := s.current(); p != nil {
		p.Kill()
	}
}

// Signal sends sig to the server's process group.
func (s *serverProc) Signal(sig syscall.Signal) error {
	p := s.current()
	select {
	case <-p.Done():
		return errors.New("the server has exited")
	default:
	}
	return syscall.Kill(-p.Pid(), sig)
}

// PgBin finds PostgreSQL's server binaries: $PGTEST_BIN, PATH, or the
// newest /usr/lib/postgresql/*/bin.
func PgBin() (string, error) {
	if d := os.Getenv("PGTEST_BIN"); d != "" {
		return d, nil
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		return filepath.Dir(p), nil
	}
	ms, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Slice(ms, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(ms[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(ms[j]))))
		return vi > vj
	})
	if len(ms) == 0 {
		return "", errors.New("cluster: PostgreSQL not found (apt-get install postgresql)")
	}
	return filepath.Dir(ms[0]), nil
}

// StartPG initialises a cluster and starts its server on host.
func (h *Harness) StartPG(ctx context.Context, host *Host) (*PG, error) {
	bin, err := PgBin()
	if err != nil {
		return nil, err
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("cluster: the server runs as the user postgres: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", "dlock-cluster-pg-")
	if err != nil {
		return nil, err
	}
	pg := &PG{Host: host, h: h, bin: bin, dir: dir, uid: uid, gid: gid}
	h.mu.Lock()
	h.cleanups = append(h.cleanups, func() { os.RemoveAll(dir) })
	h.mu.Unlock()
	for _, d := range []string{dir, filepath.Join(dir, "sock")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		if err := os.Chown(d, uid, gid); err != nil {
			return nil, err
		}
	}
	var out bytes.Buffer
	initdb := exec.CommandContext(ctx, "setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups",
		filepath.Join(bin, "initdb"), "-D", pg.data(), "-U", "postgres", "--auth=trust", "--no-sync", "--no-locale", "-E", "UTF8")
	initdb.Env = pgEnv()
	initdb.Stdout, initdb.Stderr = &out, &out
	if err := initdb.Run(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out.Bytes())
	}
	// The workers connect from the other namespaces (trust, as in a test
	// cluster: no password to manage).
	hba, err := os.OpenFile(filepath.Join(pg.data(), "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	_, err = fmt.Fprintf(hba, "host all all 0.0.0.0/0 trust\n")
	if e := hba.Close(); err == nil {
		err = e
	}
	if err != nil {
		return nil, err
	}
	if err := pg.Start(ctx); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, pg.DSN())
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	g, err := pgfence.New(conn)
	if err != nil {
		return nil, err
	}
	if err := g.Migrate(cctx); err != nil {
		return nil, err
	}
	if _, err := conn.Exec(cctx, pgSchema); err != nil {
		return nil, err
	}
	for _, wl := range h.Cfg.Workloads {
		if _, err := conn.Exec(cctx, `INSERT INTO register (lock) VALUES ($1) ON CONFLICT DO NOTHING`, "dlock-"+wl); err != nil {
			return nil, err
		}
	}
	return pg, nil
}

func (pg *PG) data() string { return filepath.Join(pg.dir, "data") }

// pgEnv is the environment of PostgreSQL's programs: no PG* variables of
// ours, the C locale.
func pgEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if len(kv) < 2 || kv[:2] != "PG" {
			env = append(env, kv)
		}
	}
	return append(env, "LC_ALL=C", "LANG=C")
}

// DSN is the workers' (and the harness's) connection string.
func (pg *PG) DSN() string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=2",
		net.JoinHostPort(pg.Host.IP, strconv.Itoa(pgPort)))
}

// Start starts the server from its data directory (after a kill: WAL
// recovery) and waits until it accepts connections.
func (pg *PG) Start(ctx context.Context) error {
	p, err := StartProc(pg.Host, "postgres", filepath.Join(pg.h.Dir, "logs", "postgres.log"), []string{"LC_ALL=C", "LANG=C"}, nil,
		"setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups",
		filepath.Join(pg.bin, "postgres"), "-D", pg.data(), "-p", strconv.Itoa(pgPort), "-k", filepath.Join(pg.dir, "sock"),
		"-c", "listen_addresses="+pg.Host.IP,
		"-c", "fsync=on", "-c", "synchronous_commit=on",
		"-c", "max_connections=100", "-c", "shared_buffers=32MB",
		// pgfence's caveat: a holder paused inside a transaction keeps
		// the fence row locked; bound that, as its docs advise.
		"-c", "idle_in_transaction_session_timeout=1000",
	)
	if err != nil {
		return err
	}
	if err := pg.started(pg.h, p); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(wctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, pg.DSN())
		if err == nil {
			err = conn.Ping(cctx)
			conn.Close(cctx)
		}
		ccancel()
		if err == nil {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("postgres does not accept connections: %v (its log: logs/postgres.log)", err)
		case <-p.Done():
			return fmt.Errorf("postgres exited: %v (its log: logs/postgres.log)", p.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Kill SIGKILLs every process of the server (the postmaster and its
// backends, each of which PostgreSQL makes a process group of its own)
// and waits until the postmaster is reaped and every backend has exited
// (up to 10 s): a backend still exiting holds the shared memory, and a
// restart then fails ("pre-existing shared memory block ... is still in
// use"; TestPGFenceSurvivesKill, under load).
func (pg *PG) Kill() {
	p := pg.current()
	if p == nil {
		return
	}
	pids, _ := pg.signalAll(p, syscall.SIGKILL)
	p.Kill()
	waitExited(pids, 10*time.Second)
}

// waitExited waits (up to limit) until no process of pids runs: each is
// gone or a zombie. The backends are the postmaster's children, reaped by
// init once it is gone, so there is no exit to wait on: /proc is polled.
func waitExited(pids []int, limit time.Duration) {
	end := time.Now().Add(limit)
	for _, pid := range pids {
		for time.Now().Before(end) {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			i := bytes.LastIndexByte(b, ')')
			if err != nil || i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X' {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// Signal sends sig to every process of the server (SIGSTOP, SIGCONT).
func (pg *PG) Signal(sig syscall.Signal) error {
	p := pg.current()
	select {
	case <-p.Done():
		return errors.New("postgres has exited")
	default:
	}
	_, err := pg.signalAll(p, sig)
	return err
}

// signalAll sends sig to the postmaster, then to its descendants, and
// returns the descendants signalled. The postmaster is stopped first, so
// that it forks no backend meanwhile (and continued last when sig is
// SIGCONT).
func (pg *PG) signalAll(p *Proc, sig syscall.Signal) ([]int, error) {
	pid := p.Pid()
	if sig != syscall.SIGCONT {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return nil, err
		}
	}
	var errs []error
	kids := descendants(pid)
	for _, c := range kids {
		if err := syscall.Kill(c, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, err)
		}
	}
	if err := syscall.Kill(pid, sig); err != nil {
		errs = append(errs, err)
	}
	return kids, errors.Join(errs...)
}

// descendants lists the processes below pid, from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		c, err1 := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		pp, err2 := strconv.Atoi(f[1])
		if err1 == nil && err2 == nil {
			children[pp] = append(children[pp], c)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		out = append(out, children[n]...)
		queue = append(queue, children[n]...)
	}
	return out
}

// Collect reads what the guard admitted and the control's counters into
// the run's directory: audit.jsonl (history.Record writes, in commit
// order per lock) and control.json (each lock's final counter).
func (pg *PG) Collect(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, pg.DSN())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(cctx, `SELECT lock, tok, v, t FROM audit ORDER BY id`)
	if err != nil {
		return err
	}
	var recs []history.Record
	for rows.Next() {
		var r history.Record
		var tok int64
		if err := rows.Scan(&r.Lock, &tok, &r.Value, &r.T); err != nil {
			rows.Close()
			return err
		}
		r.Kind, r.Tok = history.Write, uint64(tok)
		recs = append(recs, r)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	ctl := map[string]int64{}
	rows, err = conn.Query(cctx, `SELECT lock, ctl FROM register`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var lock string
		var v int64
		if err := rows.Scan(&lock, &v); err != nil {
			rows.Close()
			return err
		}
		ctl[lock] = v
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return writeGuardRecords(pg.h.Dir, recs, ctl)
}

// writeGuardRecords writes a guard run's records into dir: audit.jsonl
// (the writes the guard admitted, in the resource's order) and
// control.json (each lock's control counter at the end).
func writeGuardRecords(dir string, audit []history.Record, ctl map[string]int64) error {
	b, err := json.MarshalIndent(ctl, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "control.json"), b, 0o644); err != nil {
		return err
	}
	w, err := history.Create(filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		return err
	}
	for _, r := range audit {
		if err := w.Write(r); err != nil {
			w.Close()
			return err
		}
	}
	return w.Close()
}
