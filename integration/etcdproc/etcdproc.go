// Package etcdproc runs etcd members as real processes on loopback, for
// tests that must crash one (SIGKILL, no graceful leader hand-over), pause
// one (SIGSTOP) or restart one, which an etcd embedded in the test process
// cannot do. The binary is etcd's own server main (etcdmain), built from
// this module; members keep fsync on (etcd's defaults), with their data in
// a temporary directory.
//
//	c := etcdproc.New(t, 3)          // 3 members, stopped at cleanup
//	cli := c.Client(t)               // closed at cleanup
//	l := c.Leader(t)                 // the member that leads now
//	l.Kill(t)                        // SIGKILL
//	l.Restart(t)                     // same data, same ports
//
// # Caveats
//
//   - Election settings are etcd's defaults (heartbeat 100ms, election
//     timeout 1s) unless WithElection says otherwise.
//   - A port found free may be taken before the member binds it; New
//     retries a few times on fresh ports.
package etcdproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock/integration/etcdtest"
)

// StartTimeout bounds how long New and Restart wait for the cluster to
// answer.
const StartTimeout = 60 * time.Second

// Binary returns the path of an etcd server binary built from this
// module's go.etcd.io/etcd/server/v3 (its etcdmain), building it into a
// temporary directory the first time (the go build cache makes later
// builds quick). Set DLOCK_ETCD to use another binary.
func Binary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("DLOCK_ETCD"); p != "" {
		return p
	}
	build.once.Do(func() { build.path, build.err = buildEtcd() })
	if build.err != nil {
		tb.Fatalf("etcdproc: %v", build.err)
	}
	return build.path
}

// build is the binary of this test process, built once.
var build struct {
	once sync.Once
	path string
	err  error
}

func buildEtcd() (string, error) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	dir, err := os.MkdirTemp("", "etcdproc-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "etcd")
	cmd := exec.Command("go", "build", "-o", path, "./integration/containers/etcd")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build etcd: %w\n%s", err, out)
	}
	return path, nil
}

// Option configures New.
type Option func(*config)

type config struct {
	heartbeat, election time.Duration
	args                []string
}

// WithElection sets the raft heartbeat interval and election timeout.
// Optional, defaults to etcd's 100ms and 1s.
func WithElection(heartbeat, election time.Duration) Option {
	return func(c *config) { c.heartbeat, c.election = heartbeat, election }
}

// WithArgs adds command-line flags to every member (for example
// "--snapshot-count=100").
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// Cluster is a running cluster of member processes. Its methods are safe
// for concurrent use.
type Cluster struct {
	members []*Member
}

// Member is one etcd process.
type Member struct {
	Name      string
	ClientURL string // http://127.0.0.1:port
	PeerURL   string
	dir       string
	bin       string
	args      []string
	log       *os.File

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
}

// New starts a cluster of n members (1, 3 or 5) and stops it at cleanup.
// It fails the test if the cluster does not answer within StartTimeout.
func New(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	cfg := config{heartbeat: 100 * time.Millisecond, election: time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	bin := Binary(t)
	var err error
	for range 5 {
		var c *Cluster
		c, err = start(t, bin, n, cfg)
		if err == nil {
			return c
		}
		c.stop()
	}
	t.Fatalf("etcdproc: %v", err)
	return nil
}

func start(t testing.TB, bin string, n int, cfg config) (*Cluster, error) {
	c := &Cluster{}
	var initial []string
	root := t.TempDir()
	for i := range n {
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			ClientURL: "http://" + etcdtest.FreeAddr(t),
			PeerURL:   "http://" + etcdtest.FreeAddr(t),
			dir:       filepath.Join(root, fmt.Sprintf("m%d", i)),
			bin:       bin,
		}
		initial = append(initial, m.Name+"="+m.PeerURL)
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.args = append([]string{
			"--name=" + m.Name, "--data-dir=" + filepath.Join(m.dir, "data"),
			"--listen-client-urls=" + m.ClientURL, "--advertise-client-urls=" + m.ClientURL,
			"--listen-peer-urls=" + m.PeerURL, "--initial-advertise-peer-urls=" + m.PeerURL,
			"--initial-cluster=" + strings.Join(initial, ","), "--initial-cluster-state=new",
			"--initial-cluster-token=etcdproc",
			fmt.Sprintf("--heartbeat-interval=%d", cfg.heartbeat.Milliseconds()),
			fmt.Sprintf("--election-timeout=%d", cfg.election.Milliseconds()),
			"--log-level=warn",
		}, cfg.args...)
		if err := os.MkdirAll(m.dir, 0o700); err != nil {
			return c, err
		}
		log, err := os.Create(filepath.Join(m.dir, "log"))
		if err != nil {
			return c, err
		}
		m.log = log
		if err := m.spawn(); err != nil {
			return c, err
		}
	}
	t.Cleanup(c.stop)
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	for _, m := range c.members {
		if err := m.ready(ctx); err != nil {
			return c, fmt.Errorf("%s: %w (log: %s)", m.Name, err, m.tail())
		}
	}
	return c, nil
}

func (m *Member) spawn() error {
	cmd := exec.Command(m.bin, m.args...)
	cmd.Stdout, cmd.Stderr = m.log, m.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // gone with the test, however it ends
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
	return nil
}

// ready waits until the member answers a status request.
func (m *Member) ready(ctx context.Context) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		m.mu.Lock()
		done := m.done
		m.mu.Unlock()
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Status(sctx, m.ClientURL)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last: %v)", ctx.Err(), err)
		case <-done:
			return errors.New("exited")
		case <-time.After(50 * time.Millisecond): // polling: etcd has no readiness event to wait on
		}
	}
}

func (m *Member) tail() string {
	b, _ := os.ReadFile(m.log.Name())
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func (c *Cluster) stop() {
	for _, m := range c.members {
		m.signal(syscall.SIGKILL)
		m.wait()
		if m.log != nil {
			m.log.Close()
		}
	}
}

func (m *Member) signal(sig syscall.Signal) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil || m.cmd.Process == nil {
		return nil
	}
	if sig == syscall.SIGKILL {
		m.cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies at once either way
	}
	return m.cmd.Process.Signal(sig)
}

// running reports whether the member's process has not exited.
func (m *Member) running() bool {
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	select {
	case <-done:
		return false
	default:
		return done != nil
	}
}

func (m *Member) wait() {
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	if done != nil {
		<-done
	}
}

// Members returns the members, in start order.
func (c *Cluster) Members() []*Member { return c.members }

// Endpoints returns every member's client URL.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// HostPorts returns every member's client address as host:port.
func (c *Cluster) HostPorts() []string {
	var hps []string
	for _, m := range c.members {
		hps = append(hps, strings.TrimPrefix(m.ClientURL, "http://"))
	}
	return hps
}

// Client returns a client of every member, closed at cleanup.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return etcdtest.NewClient(t, clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
}

// Leader returns the member that leads now, as the running members report
// it, waiting (within StartTimeout) for one that all of them agree on.
func (c *Cluster) Leader(t testing.TB) *Member {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), StartTimeout)
	defer cancel()
	for {
		if m := c.leader(ctx); m != nil {
			return m
		}
		select {
		case <-ctx.Done():
			t.Fatalf("etcdproc: no leader within %v", StartTimeout)
		case <-time.After(50 * time.Millisecond): // polling: no event for a leader change across members
		}
	}
}

func (c *Cluster) leader(ctx context.Context) *Member {
	byID := map[uint64]*Member{}
	var lead uint64
	for _, m := range c.members {
		if !m.running() {
			continue
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.ClientURL}, DialTimeout: 500 * time.Millisecond, Logger: zap.NewNop()})
		if err != nil {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		st, err := cli.Status(sctx, m.ClientURL)
		cancel()
		cli.Close()
		if err != nil {
			continue
		}
		byID[st.Header.MemberId] = m
		if st.Leader == 0 || (lead != 0 && st.Leader != lead) {
			return nil
		}
		lead = st.Leader
	}
	return byID[lead]
}

// Kill sends the member SIGKILL and waits for it to exit: a crash, with no
// hand-over of leadership.
func (m *Member) Kill(t testing.TB) {
	t.Helper()
	if err := m.signal(syscall.SIGKILL); err != nil {
		t.Fatalf("etcdproc: kill %s: %v", m.Name, err)
	}
	m.wait()
}

// Stop pauses the member with SIGSTOP; Cont resumes it.
func (m *Member) Stop(t testing.TB) {
	t.Helper()
	if err := m.signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("etcdproc: stop %s: %v", m.Name, err)
	}
}

// Cont resumes a member paused by Stop.
func (m *Member) Cont(t testing.TB) {
	t.Helper()
	if err := m.signal(syscall.SIGCONT); err != nil {
		t.Fatalf("etcdproc: cont %s: %v", m.Name, err)
	}
}

// Restart starts a member that was killed again, with its data and ports,
// and waits until it answers.
func (m *Member) Restart(t testing.TB) {
	t.Helper()
	m.wait()
	for i, a := range m.args {
		if a == "--initial-cluster-state=new" {
			m.args[i] = "--initial-cluster-state=existing"
		}
	}
	if err := m.spawn(); err != nil {
		t.Fatalf("etcdproc: restart %s: %v", m.Name, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), StartTimeout)
	defer cancel()
	if err := m.ready(ctx); err != nil {
		t.Fatalf("etcdproc: restart %s: %v (log: %s)", m.Name, err, m.tail())
	}
}

// PID returns the member's process ID.
func (m *Member) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd.Process.Pid
}

// HostPort returns the member's client address as host:port.
func (m *Member) HostPort() string { return strings.TrimPrefix(m.ClientURL, "http://") }
