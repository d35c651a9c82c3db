// Package etcdtest runs etcd for tests, dlock's and users' own: one call,
// one or three members as real processes on free loopback ports, data in
// a temporary directory, fast election settings, everything stopped by
// t.Cleanup (and by the kernel if the test process dies). A member can be
// crashed (SIGKILL: no hand-over of leadership), paused (SIGSTOP), stopped
// gracefully and restarted with its data; a fault proxy can sit between
// one client and the cluster, to cut that client off (blackhole) or delay
// it.
//
//	c := etcdtest.New(t)                 // one member
//	cli := c.Client(t)                   // closed at cleanup
//	cli, p := c.ProxiedClient(t)         // through a fault proxy
//	p.Blackhole()                        // the client hears nothing now
//	c.Leader(t).Kill(t)                  // a crash
//
// The binary is etcd's own server main (etcdmain), built by Binary.
//
// # Caveats
//
//   - Binary builds etcd's own server main on first use, into the user
//     cache (a minute or two on a fresh machine; later runs reuse it): in
//     a checkout of dlock from its integration/containers module, in a
//     user's module from the Go module proxy at the version of etcd's
//     client the test is built with (ServerVersion). Set DLOCK_ETCD to the
//     path of an etcd binary to skip that.
//   - Members run with --unsafe-no-fsync (tests do not survive power
//     loss) unless WithFsync is given.
//   - Election settings are fast (heartbeat 50ms, election 500ms): a loaded
//     machine may see extra leader elections, which the code under test
//     must tolerate anyway.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/dlock-go/dlock/integration/tlstest"
)

// StartTimeout bounds how long New, Restart and Leader wait.
const StartTimeout = 60 * time.Second

// Option configures New.
type Option func(*config)

type config struct {
	members             int
	heartbeat, election time.Duration
	certs               *tlstest.Certs
	clientAuth          bool
	fsync               bool
	args                []string
}

// WithTLS makes the members serve clients over TLS with certs' server
// certificate; with clientAuth they also require a client certificate
// signed by certs' CA (mutual TLS, as Kubernetes' etcd does). The
// cluster's Config then trusts the CA and presents the client certificate.
func WithTLS(certs *tlstest.Certs, clientAuth bool) Option {
	return func(c *config) { c.certs, c.clientAuth = certs, clientAuth }
}

// WithMembers sets the number of members: 1 (the default), 3, 5 or 7.
func WithMembers(n int) Option { return func(c *config) { c.members = n } }

// WithElection sets the raft heartbeat interval and election timeout.
// Optional, defaults to 50ms and 500ms.
func WithElection(heartbeat, election time.Duration) Option {
	return func(c *config) { c.heartbeat, c.election = heartbeat, election }
}

// WithFsync keeps etcd's fsync on (its default outside tests), for tests
// of crashes that must not lose acknowledged writes.
func WithFsync() Option { return func(c *config) { c.fsync = true } }

// WithArgs adds command-line flags to every member (for example
// "--snapshot-count=100").
func WithArgs(args ...string) Option { return func(c *config) { c.args = append(c.args, args...) } }

// Cluster is a running etcd cluster. Its methods are safe for concurrent
// use.
type Cluster struct {
	root    string
	members []*Member
}

// Member is one etcd process. Stop, Kill and Restart it to test member
// loss; its data directory survives a restart.
type Member struct {
	name      string
	clientURL string // http(s)://127.0.0.1:port
	peerURL   string // http://127.0.0.1:port
	dir       string
	args      []string
	bin       string
	certs     *tlstest.Certs

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has been waited for
	held []io.Closer   // the member's ports while it is down (holdPorts)
}

// New starts a cluster and registers its shutdown with t.Cleanup. It
// fails the test if the cluster is not ready within StartTimeout.
func New(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	c, err := Start(opts...)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// Start starts a cluster outside a test (an example, a demo); Close stops
// it and removes its data.
func Start(opts ...Option) (*Cluster, error) {
	cfg := config{members: 1, heartbeat: 50 * time.Millisecond, election: 500 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.members < 1 || cfg.members > 7 || cfg.members%2 == 0 {
		return nil, fmt.Errorf("members = %d; want 1, 3, 5 or 7", cfg.members)
	}
	bin, err := binary()
	if err != nil {
		return nil, err
	}
	// A port found free may be taken before etcd binds it (other test
	// binaries run in parallel): start again on fresh ports.
	for range 5 {
		var c *Cluster
		if c, err = start(bin, cfg); err == nil {
			return c, nil
		}
		c.Close()
		if !errors.Is(err, errPortTaken) {
			return nil, err
		}
	}
	return nil, err
}

var errPortTaken = errors.New("address already in use")

func start(bin string, cfg config) (*Cluster, error) {
	root, err := os.MkdirTemp("", "etcdtest-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{root: root}
	scheme := "http"
	if cfg.certs != nil {
		scheme = "https"
	}
	var initial []string
	peers := make([]string, cfg.members)
	for i := range cfg.members {
		peer, err := freeAddr()
		if err != nil {
			return c, err
		}
		client, err := freeAddr()
		if err != nil {
			return c, err
		}
		peers[i] = "http://" + peer
		m := &Member{name: fmt.Sprintf("m%d", i), clientURL: scheme + "://" + client, peerURL: peers[i], dir: filepath.Join(root, fmt.Sprintf("m%d", i)), bin: bin, certs: cfg.certs}
		initial = append(initial, m.name+"="+peers[i])
		c.members = append(c.members, m)
	}
	for i, m := range c.members {
		m.args = append([]string{
			"--name=" + m.name, "--data-dir=" + filepath.Join(m.dir, "data"),
			"--listen-client-urls=" + m.clientURL, "--advertise-client-urls=" + m.clientURL,
			"--listen-peer-urls=" + peers[i], "--initial-advertise-peer-urls=" + peers[i],
			"--initial-cluster=" + strings.Join(initial, ","), "--initial-cluster-state=new",
			"--initial-cluster-token=etcdtest",
			"--heartbeat-interval=" + strconv.FormatInt(cfg.heartbeat.Milliseconds(), 10),
			"--election-timeout=" + strconv.FormatInt(cfg.election.Milliseconds(), 10),
			"--log-level=error",
		}, cfg.args...)
		if !cfg.fsync {
			m.args = append(m.args, "--unsafe-no-fsync")
		}
		if cs := cfg.certs; cs != nil {
			m.args = append(m.args, "--cert-file="+cs.ServerCert, "--key-file="+cs.ServerKey, "--trusted-ca-file="+cs.CA,
				"--client-cert-auth="+strconv.FormatBool(cfg.clientAuth))
		}
		if err := os.MkdirAll(m.dir, 0o700); err != nil {
			return c, err
		}
		if err := m.spawn(); err != nil {
			return c, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	for _, m := range c.members {
		if err := m.ready(ctx); err != nil {
			return c, err
		}
	}
	return c, nil
}

func (m *Member) spawn() error {
	log, err := os.OpenFile(filepath.Join(m.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close() // the child has its own copy
	cmd := exec.Command(m.bin, m.args...)
	cmd.Stdout, cmd.Stderr = log, log
	setDeathSignal(cmd) // gone with the test process, however it ends
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("member %s: %w", m.name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
	return nil
}

// ready waits until the member answers a status request, or its process
// exits (its log says why).
func (m *Member) ready(ctx context.Context) error {
	cli, err := clientv3.New(m.clientConfig([]string{m.clientURL}))
	if err != nil {
		return err
	}
	defer cli.Close()
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	for {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Status(sctx, m.clientURL)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("member %s not ready within %v: %v (log: %s)", m.name, StartTimeout, err, m.Log())
		case <-done:
			log := m.Log()
			if strings.Contains(log, "address already in use") {
				return fmt.Errorf("member %s: %w", m.name, errPortTaken)
			}
			return fmt.Errorf("member %s exited (log: %s)", m.name, log)
		case <-time.After(20 * time.Millisecond): // polling: etcd has no readiness event to wait on
		}
	}
}

func (m *Member) clientConfig(eps []string) clientv3.Config {
	cfg := clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if m.certs != nil {
		cfg.TLS = m.certs.ClientConfig()
		// gRPC checks the certificate against the authority, not
		// TLS.ServerName (see dlock's Config.TLS).
		cfg.DialOptions = []grpc.DialOption{grpc.WithAuthority(cfg.TLS.ServerName)}
	}
	return cfg
}

// Log returns the tail of the member's log.
func (m *Member) Log() string {
	b, _ := os.ReadFile(filepath.Join(m.dir, "log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Close kills every member and removes the data directories.
func (c *Cluster) Close() {
	if c == nil {
		return
	}
	for _, m := range c.members {
		m.signal(syscall.SIGKILL)
		m.wait()
		m.releasePorts()
	}
	os.RemoveAll(c.root)
}

// signal sends sig to the member's process if it runs; a SIGKILL also
// resumes it (a stopped process dies at once either way).
func (m *Member) signal(sig syscall.Signal) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return nil
	}
	select {
	case <-m.done:
		return nil
	default:
	}
	if sig == syscall.SIGKILL {
		m.cmd.Process.Signal(syscall.SIGCONT)
	}
	return m.cmd.Process.Signal(sig)
}

func (m *Member) wait() {
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	if done != nil {
		<-done
	}
}

// running reports whether the member's process has not exited.
func (m *Member) running() bool {
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Members returns the cluster's members.
func (c *Cluster) Members() []*Member { return c.members }

// Endpoints returns the client URLs of all members.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientURL)
	}
	return eps
}

// HostPorts returns the members' client addresses as host:port, for DSNs.
func (c *Cluster) HostPorts() []string {
	var hps []string
	for _, m := range c.members {
		hps = append(hps, m.HostPort())
	}
	return hps
}

// Endpoint returns the member's client URL.
func (m *Member) Endpoint() string { return m.clientURL }

// HostPort returns the member's client address as host:port.
func (m *Member) HostPort() string {
	_, hp, _ := strings.Cut(m.clientURL, "://")
	return hp
}

// Name returns the member's name.
func (m *Member) Name() string { return m.name }

// PID returns the member's process ID (0 if it is not running).
func (m *Member) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// Stop stops the member gracefully (SIGTERM: a leader hands leadership
// over first) and waits for it to exit; its data directory is kept.
func (m *Member) Stop(t testing.TB) {
	t.Helper()
	m.Cont(t) // a paused member would not act on SIGTERM
	if err := m.signal(syscall.SIGTERM); err != nil {
		t.Fatalf("etcdtest: stop %s: %v", m.name, err)
	}
	m.wait()
	m.holdPorts()
}

// Kill crashes the member (SIGKILL: no hand-over of leadership) and waits
// for it to exit; its data directory is kept.
func (m *Member) Kill(t testing.TB) {
	t.Helper()
	if err := m.signal(syscall.SIGKILL); err != nil {
		t.Fatalf("etcdtest: kill %s: %v", m.name, err)
	}
	m.wait()
	m.holdPorts()
}

// holdPorts reserves the ports of a member that is down (reservePort:
// bound, not listening, so a connection to them is refused as before), so
// that no other server (another test's, picking a port that is free)
// takes them before Restart binds them again; releasePorts lets them go.
// A port it cannot reserve is left alone.
func (m *Member) holdPorts() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.held) > 0 {
		return
	}
	for _, u := range []string{m.clientURL, m.peerURL} {
		if r, err := reservePort(u[strings.Index(u, "://")+3:]); err == nil {
			m.held = append(m.held, r)
		}
	}
}

func (m *Member) releasePorts() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range m.held {
		r.Close()
	}
	m.held = nil
}

// Pause stops the member's process with SIGSTOP, and returns once every
// thread of it is stopped (on Linux); Cont resumes it.
func (m *Member) Pause(t testing.TB) {
	t.Helper()
	if err := m.signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("etcdtest: pause %s: %v", m.name, err)
	}
	m.mu.Lock()
	pid := 0
	if m.cmd != nil && m.cmd.Process != nil {
		pid = m.cmd.Process.Pid
	}
	m.mu.Unlock()
	if pid == 0 {
		return
	}
	if err := waitStopped(pid, 5*time.Second); err != nil {
		t.Fatalf("etcdtest: pause %s: %v", m.name, err)
	}
}

// Cont resumes a member paused by Pause.
func (m *Member) Cont(t testing.TB) {
	t.Helper()
	if err := m.signal(syscall.SIGCONT); err != nil {
		t.Fatalf("etcdtest: cont %s: %v", m.name, err)
	}
}

// Restart starts a stopped or killed member again, with its data and its
// ports, and waits until it answers.
func (m *Member) Restart(t testing.TB) {
	t.Helper()
	m.wait()
	for i, a := range m.args {
		if a == "--initial-cluster-state=new" {
			m.args[i] = "--initial-cluster-state=existing"
		}
	}
	m.releasePorts()
	if err := m.spawn(); err != nil {
		t.Fatalf("etcdtest: restart: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), StartTimeout)
	defer cancel()
	if err := m.ready(ctx); err != nil {
		t.Fatalf("etcdtest: restart: %v", err)
	}
}

// status returns the member's raft status: its ID and its leader's (0 if
// it has none); ok is false if it does not answer.
func (m *Member) status(ctx context.Context) (id, leader uint64, ok bool) {
	if !m.running() {
		return 0, 0, false
	}
	cfg := m.clientConfig([]string{m.clientURL})
	cfg.DialTimeout = 500 * time.Millisecond
	cli, err := clientv3.New(cfg)
	if err != nil {
		return 0, 0, false
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	st, err := cli.Status(sctx, m.clientURL)
	if err != nil {
		return 0, 0, false
	}
	return st.Header.MemberId, st.Leader, true
}

// IsLeader reports whether the member is running and is the raft leader.
func (m *Member) IsLeader() bool {
	id, leader, ok := m.status(context.Background())
	return ok && leader != 0 && id == leader
}

// Leader returns the current leader as the running members report it,
// waiting up to StartTimeout for one that all of them agree on.
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
			t.Fatalf("etcdtest: no leader within %v", StartTimeout)
		case <-time.After(20 * time.Millisecond): // polling raft state: there is no notification for it
		}
	}
}

func (c *Cluster) leader(ctx context.Context) *Member {
	byID := map[uint64]*Member{}
	var lead uint64
	for _, m := range c.members {
		id, leader, ok := m.status(ctx)
		if !ok {
			continue
		}
		byID[id] = m
		if leader == 0 || lead != 0 && leader != lead {
			return nil
		}
		lead = leader
	}
	return byID[lead]
}

// Config returns a client configuration for the cluster's endpoints (and,
// on a TLS cluster, its CA and client certificate).
func (c *Cluster) Config() clientv3.Config { return c.members[0].clientConfig(c.Endpoints()) }

// Client returns a client of the whole cluster, closed by t.Cleanup.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return NewClient(t, c.Config())
}

// NewClient creates a client from cfg and closes it at t.Cleanup.
func NewClient(t testing.TB, cfg clientv3.Config) *clientv3.Client {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcdtest: client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// ProxiedClient returns a client that reaches the cluster only through a
// fault proxy to the first member (or the member given), and the proxy.
// Both are closed by t.Cleanup.
func (c *Cluster) ProxiedClient(t testing.TB, member ...*Member) (*clientv3.Client, *Proxy) {
	t.Helper()
	p := c.NewProxy(t, member...)
	cfg := c.Config()
	scheme, _, _ := strings.Cut(c.members[0].clientURL, "://")
	cfg.Endpoints = []string{scheme + "://" + p.Addr()}
	return NewClient(t, cfg), p
}

// NewProxy starts a fault proxy to the first member (or the member given)
// on a free loopback port, closed by t.Cleanup. Point a client (or a DSN)
// at Addr.
func (c *Cluster) NewProxy(t testing.TB, member ...*Member) *Proxy {
	t.Helper()
	m := c.members[0]
	if len(member) > 0 {
		m = member[0]
	}
	return ProxyTo(t, m.HostPort())
}

// FreeAddr returns a loopback address "127.0.0.1:port" whose port was free a
// moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := freeAddr()
	if err != nil {
		t.Fatalf("etcdtest: free port: %v", err)
	}
	return addr
}

func freeAddr() (string, error) {
	// Prefer a random port below the kernel's ephemeral range (32768 and
	// up on Linux), which the many outgoing connections of a test run draw
	// from; fall back to a kernel-chosen port.
	for range 20 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(10000+rand.IntN(20000)))
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
