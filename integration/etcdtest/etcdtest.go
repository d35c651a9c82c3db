// Package etcdtest starts etcd embedded in the test process, for dlock's
// tests and for users' own: one call, one or three members on free loopback
// ports, data in a temporary directory, fast election settings, everything
// stopped by t.Cleanup. A fault proxy can sit between one client and the
// cluster, to cut that client off (blackhole), pause or delay it.
//
//	c := etcdtest.New(t)                 // one member
//	cli := c.Client(t)                   // closed at cleanup
//	cli, p := c.ProxiedClient(t)         // through a fault proxy
//	p.Blackhole()                        // the client hears nothing now
//
// # Caveats
//
//   - The embedded members run in the test process: a SIGSTOP of the test
//     stops them too. Pause a holder by running it in a child process.
//   - Election settings are fast (TickMs 50, ElectionMs 500): a loaded
//     machine may see extra leader elections, which the code under test must
//     tolerate anyway.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock/integration/tlstest"
)

// StartTimeout bounds how long New waits for the cluster to be ready.
const StartTimeout = 60 * time.Second

// Option configures New.
type Option func(*config)

type config struct {
	members    int
	tickMs     uint
	electionMs uint
	certs      *tlstest.Certs
	clientAuth bool
}

// WithTLS makes the members serve clients over TLS with certs' server
// certificate; with clientAuth they also require a client certificate
// signed by certs' CA (mutual TLS, as Kubernetes' etcd does). The
// cluster's Config then trusts the CA and presents the client certificate.
func WithTLS(certs *tlstest.Certs, clientAuth bool) Option {
	return func(c *config) { c.certs, c.clientAuth = certs, clientAuth }
}

// WithMembers sets the number of members: 1 (the default) or 3 (or any odd
// number up to 7).
func WithMembers(n int) Option { return func(c *config) { c.members = n } }

// WithElection sets the raft heartbeat tick and election timeout.
// Optional, defaults to 50ms and 500ms.
func WithElection(tick, election time.Duration) Option {
	return func(c *config) {
		c.tickMs, c.electionMs = uint(tick/time.Millisecond), uint(election/time.Millisecond)
	}
}

// Cluster is a running embedded etcd cluster. Its methods are safe for
// concurrent use.
type Cluster struct {
	root    string
	members []*Member
}

// Member is one embedded etcd member. Stop and Restart it to test member
// loss; its data directory survives a restart.
type Member struct {
	name      string
	dir       string
	peerURL   url.URL
	clientURL url.URL
	initial   string
	cfg       config
	mu        sync.Mutex
	etcd      *embed.Etcd
}

// New starts an embedded etcd cluster and registers its shutdown with
// t.Cleanup. It fails the test if the cluster is not ready within
// StartTimeout.
func New(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	c, err := Start(opts...)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// Start starts an embedded etcd cluster outside a test (an example, a
// demo); Close stops it and removes its data.
func Start(opts ...Option) (*Cluster, error) {
	cfg := config{members: 1, tickMs: 50, electionMs: 500}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.members < 1 || cfg.members > 7 || cfg.members%2 == 0 {
		return nil, fmt.Errorf("members = %d; want 1, 3, 5 or 7", cfg.members)
	}
	// A port found free may be taken before etcd binds it (other test
	// binaries run in parallel): start again on fresh ports.
	var err error
	for range startAttempts {
		var c *Cluster
		if c, err = start(cfg); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			return c, err
		}
	}
	return nil, err
}

// startAttempts bounds the restarts on a port taken in between.
const startAttempts = 5

func start(cfg config) (_ *Cluster, err error) {
	root, err := os.MkdirTemp("", "etcdtest-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{root: root}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	var initial []string
	for i := range cfg.members {
		m := &Member{
			name: fmt.Sprintf("m%d", i),
			dir:  filepath.Join(root, fmt.Sprintf("m%d", i)),
			cfg:  cfg,
		}
		peer, err := freeAddr()
		if err != nil {
			return nil, err
		}
		client, err := freeAddr()
		if err != nil {
			return nil, err
		}
		m.peerURL = url.URL{Scheme: "http", Host: peer}
		m.clientURL = url.URL{Scheme: "http", Host: client}
		if cfg.certs != nil {
			m.clientURL.Scheme = "https"
		}
		initial = append(initial, m.name+"="+m.peerURL.String())
		c.members = append(c.members, m)
	}
	errc := make(chan error, len(c.members))
	for _, m := range c.members {
		m.initial = strings.Join(initial, ",")
		go func() { errc <- m.start(embed.ClusterStateFlagNew) }()
	}
	var errs []error
	for range c.members {
		errs = append(errs, <-errc)
	}
	return c, errors.Join(errs...)
}

func (m *Member) start(state string) error {
	ec := embed.NewConfig()
	ec.Name = m.name
	ec.Dir = m.dir
	ec.ListenPeerUrls = []url.URL{m.peerURL}
	ec.AdvertisePeerUrls = []url.URL{m.peerURL}
	ec.ListenClientUrls = []url.URL{m.clientURL}
	ec.AdvertiseClientUrls = []url.URL{m.clientURL}
	if c := m.cfg.certs; c != nil {
		ec.ClientTLSInfo = transport.TLSInfo{
			CertFile: c.ServerCert, KeyFile: c.ServerKey,
			TrustedCAFile: c.CA, ClientCertAuth: m.cfg.clientAuth,
		}
	}
	ec.InitialCluster = m.initial
	ec.InitialClusterToken = "etcdtest"
	ec.ClusterState = state
	ec.TickMs = m.cfg.tickMs
	ec.ElectionMs = m.cfg.electionMs
	ec.LogLevel = "error"
	ec.LogOutputs = []string{"/dev/null"}
	ec.UnsafeNoFsync = true // tests do not survive power loss
	ec.SnapshotCount = 10000
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return fmt.Errorf("start member %s: %w", m.name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("member %s: %w", m.name, err)
	case <-time.After(StartTimeout):
		e.Server.Stop()
		e.Close()
		return fmt.Errorf("member %s not ready within %v", m.name, StartTimeout)
	}
	m.mu.Lock()
	m.etcd = e
	m.mu.Unlock()
	return nil
}

// Close stops every member and removes the data directories.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for _, m := range c.members {
		wg.Go(m.close)
	}
	wg.Wait()
	os.RemoveAll(c.root)
}

func (m *Member) close() {
	m.mu.Lock()
	e := m.etcd
	m.etcd = nil
	m.mu.Unlock()
	if e != nil {
		e.Close()
	}
}

// Members returns the cluster's members.
func (c *Cluster) Members() []*Member { return c.members }

// Endpoints returns the client URLs of all members.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.Endpoint())
	}
	return eps
}

// Endpoint returns the member's client URL.
func (m *Member) Endpoint() string { return m.clientURL.String() }

// Name returns the member's name.
func (m *Member) Name() string { return m.name }

// Stop stops the member (its data directory is kept).
func (m *Member) Stop(t testing.TB) {
	t.Helper()
	m.close()
}

// Restart starts a stopped member again with its data.
func (m *Member) Restart(t testing.TB) {
	t.Helper()
	if err := m.start(embed.ClusterStateFlagExisting); err != nil {
		t.Fatalf("etcdtest: restart: %v", err)
	}
}

// IsLeader reports whether the member is running and is the raft leader.
func (m *Member) IsLeader() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd != nil && m.etcd.Server.Leader() == m.etcd.Server.MemberID()
}

// Leader returns the current leader, waiting up to StartTimeout for one.
func (c *Cluster) Leader(t testing.TB) *Member {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	for {
		for _, m := range c.members {
			if m.IsLeader() {
				return m
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("etcdtest: no leader within %v", StartTimeout)
		case <-time.After(20 * time.Millisecond): // polling raft state: there is no notification for it
		}
	}
}

// Config returns a client configuration for the cluster's endpoints (and,
// on a TLS cluster, its CA and client certificate).
func (c *Cluster) Config() clientv3.Config {
	cfg := clientv3.Config{
		Endpoints:   c.Endpoints(),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
	if certs := c.members[0].cfg.certs; certs != nil {
		cfg.TLS = certs.ClientConfig()
	}
	return cfg
}

// HostPorts returns the members' client addresses as host:port, for DSNs.
func (c *Cluster) HostPorts() []string {
	var hps []string
	for _, m := range c.members {
		hps = append(hps, m.clientURL.Host)
	}
	return hps
}

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

// Proxy is a fault-injecting TCP proxy between one client and one member.
type Proxy struct {
	proxy.Server
	addr string
}

// Addr returns the proxy's listening address, host:port.
func (p *Proxy) Addr() string { return p.addr }

// Blackhole drops all traffic in both directions; connections stay open, so
// the client notices only through its own timeouts.
func (p *Proxy) Blackhole() { p.BlackholeTx(); p.BlackholeRx() }

// Unblackhole lets traffic through again.
func (p *Proxy) Unblackhole() { p.UnblackholeTx(); p.UnblackholeRx() }

// ProxiedClient returns a client that reaches the cluster only through a
// fault proxy to the first member (or the member given), and the proxy.
// Both are closed by t.Cleanup.
func (c *Cluster) ProxiedClient(t testing.TB, member ...*Member) (*clientv3.Client, *Proxy) {
	t.Helper()
	p := c.NewProxy(t, member...)
	cfg := c.Config()
	cfg.Endpoints = []string{"http://" + p.Addr()}
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
	return ProxyTo(t, m.clientURL.Host)
}

// ProxyTo starts a TCP fault proxy to addr (host:port: an etcd member, a
// Redis server, ...) on a free loopback port, closed by t.Cleanup.
func ProxyTo(t testing.TB, addr string) *Proxy {
	t.Helper()
	from := url.URL{Scheme: "tcp", Host: FreeAddr(t)}
	p := proxy.NewServer(proxy.ServerConfig{Logger: zap.NewNop(), From: from, To: url.URL{Scheme: "tcp", Host: addr}})
	select {
	case <-p.Ready():
	case err := <-p.Error():
		t.Fatalf("etcdtest: proxy: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return &Proxy{Server: p, addr: from.Host}
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
