package dlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/dlock-go/dlock/election"
	"github.com/dlock-go/dlock/intent"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/redis"
	"github.com/dlock-go/dlock/session"
)

// ErrClosed is returned by Client.Locker and Client.Election after Close.
var ErrClosed = errors.New("dlock: client closed")

// Client is an open connection to one backend. It is safe for concurrent
// use; Close it when done.
//
// On etcd a Client survives its session: when the session ends (a
// partition longer than the TTL, a revoked lease), the grants made on it
// report their loss (Done closes, Unlock returns an error matching
// lock.ErrLockLost), and the next Lock, TryLock or Campaign through any
// Locker or Election of the Client runs on one fresh session, shared by all
// of them, started with backoff while etcd is unreachable. Nothing needs
// reopening.
type Client struct {
	cfg Config

	etcd *clientv3.Client
	mgr  *session.Manager
	rdb  []goredis.UniversalClient

	mu     sync.Mutex
	closed bool
}

// Open connects to the backend that cfg names. For etcd it also starts the
// Client's first session (one lease, one heartbeat loop for all its locks).
// It fails if cfg is invalid, or if the servers cannot be reached before ctx
// ends or cfg.DialTimeout passes (for Redlock: if fewer than a majority
// answer).
func Open(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	// The connection gets the dial timeout but a little, which explains
	// a failure (see explain).
	connect := cfg.DialTimeout - min(probeTimeout, cfg.DialTimeout/5)
	cctx, ccancel := context.WithTimeout(ctx, connect)
	defer ccancel()
	c := &Client{cfg: cfg}
	switch cfg.Backend {
	case BackendEtcd:
		if err := c.openEtcd(cctx, connect); err != nil {
			return nil, fmt.Errorf("dlock: etcd %v: %w", cfg.Endpoints, explain(ctx, err, cfg))
		}
	default:
		c.rdb = cfg.redisClients()
		if err := c.pingRedis(cctx, ctx); err != nil {
			c.closeRedis()
			return nil, err
		}
	}
	return c, nil
}

// openEtcd creates the etcd client and starts the first session within
// ctx. Given a user and password, the client logs in before New returns,
// within the client's dial timeout: that is set to connect, ctx's share
// of Open's, so that the rest is left to explain a failure, as it is
// without credentials.
func (c *Client) openEtcd(ctx context.Context, connect time.Duration) error {
	ec := c.cfg.etcdConfig()
	ec.DialTimeout = connect
	cli, err := clientv3.New(ec)
	if err != nil && ec.Username != "" && ec.Password != "" {
		return fmt.Errorf("log in as %q: %w", ec.Username, err)
	}
	if err != nil {
		return err
	}
	mgr, err := session.NewManager(cli, c.cfg.sessionOptions()...)
	if err == nil {
		_, err = mgr.Current(ctx)
	}
	if err != nil {
		cli.Close()
		return err
	}
	c.etcd, c.mgr = cli, mgr
	return nil
}

// etcdConfig is the etcd client configuration of c.
func (c Config) etcdConfig() clientv3.Config {
	ec := clientv3.Config{
		Endpoints:   c.Endpoints,
		DialTimeout: c.DialTimeout,
		Username:    c.Username,
		Password:    c.Password,
		TLS:         c.TLS,
		Logger:      zap.NewNop(),
	}
	if c.TLS != nil && c.TLS.ServerName != "" {
		// gRPC checks the server's certificate against the authority,
		// which etcd's client sets to each endpoint's host, whatever
		// TLS.ServerName says: the authority must be the name.
		ec.DialOptions = append(ec.DialOptions, grpc.WithAuthority(c.TLS.ServerName))
	}
	return ec
}

// redisClients returns one client per Redlock node, or the one client of
// a redis backend: plain, Sentinel or Cluster.
func (c Config) redisClients() []goredis.UniversalClient {
	switch {
	case c.MasterName != "":
		return []goredis.UniversalClient{goredis.NewFailoverClient(&goredis.FailoverOptions{
			MasterName: c.MasterName, SentinelAddrs: c.Endpoints,
			Username: c.Username, Password: c.Password, DB: c.DB,
			DialTimeout: c.DialTimeout, TLSConfig: c.TLS, ContextTimeoutEnabled: true,
		})}
	case c.Cluster:
		return []goredis.UniversalClient{goredis.NewClusterClient(&goredis.ClusterOptions{
			Addrs:    c.Endpoints,
			Username: c.Username, Password: c.Password,
			DialTimeout: c.DialTimeout, TLSConfig: c.TLS, ContextTimeoutEnabled: true,
		})}
	}
	var rdb []goredis.UniversalClient
	for _, ep := range c.Endpoints {
		rdb = append(rdb, goredis.NewClient(&goredis.Options{
			Addr:     ep,
			Username: c.Username, Password: c.Password, DB: c.DB,
			DialTimeout: c.DialTimeout, TLSConfig: c.TLS,
			// Honour ctx deadlines on reads, so that a stalled node
			// cannot hold a Lock (or a Redlock round) past its ctx.
			ContextTimeoutEnabled: true,
		}))
	}
	return rdb
}

// pingRedis requires the node, Sentinel master or Cluster (redis) or a
// majority of the nodes (redlock) to answer within ctx; failures are
// explained within outer.
func (c *Client) pingRedis(ctx, outer context.Context) error {
	errs := make([]error, len(c.rdb))
	var wg sync.WaitGroup
	for i, r := range c.rdb {
		eps := c.cfg.Endpoints
		if len(c.rdb) == len(eps) {
			eps = eps[i : i+1]
		}
		wg.Go(func() { errs[i] = ping(ctx, outer, r, Config{Endpoints: eps, TLS: c.cfg.TLS}) })
	}
	wg.Wait()
	if c.cfg.Backend == BackendRedis {
		if errs[0] != nil {
			return fmt.Errorf("dlock: redis: %s does not answer: %w", c.cfg.redisServer(), errs[0])
		}
		return nil
	}
	var failed []error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", c.cfg.Endpoints[i], err))
		}
	}
	n := len(c.rdb)
	if need := n/2 + 1; n-len(failed) < need {
		return fmt.Errorf("dlock: redlock: %d of %d nodes answer, need %d: %w", n-len(failed), n, need, errors.Join(failed...))
	}
	return nil
}

// ping sends PING through r, whose servers are cfg's endpoints. A failed
// dial says where and why; any other failure (a timeout, EOF) is
// explained within outer.
func ping(ctx, outer context.Context, r goredis.UniversalClient, cfg Config) error {
	err := r.Ping(ctx).Err()
	var dial *net.OpError
	if err == nil || errors.As(err, &dial) && dial.Op == "dial" {
		return err
	}
	return explain(outer, err, cfg)
}

// redisServer names what a redis backend's client talks to.
func (c Config) redisServer() string {
	eps := strings.Join(c.Endpoints, ",")
	switch {
	case c.MasterName != "":
		return fmt.Sprintf("the master %q of the sentinels %s", c.MasterName, eps)
	case c.Cluster:
		return "the cluster of the seed nodes " + eps
	}
	return "the node " + eps
}

// Config returns the Client's configuration, defaults filled in.
func (c *Client) Config() Config { return c.cfg }

// Source returns the Client's etcd sessions, for the lower-level etcd
// primitives (lock.NewSemaphore, lock.NewRWMutex, election.Run's peers):
// they then share the Client's one session and its renewal. It returns nil
// for Redis backends.
func (c *Client) Source() session.Source {
	if c.mgr == nil {
		return nil
	}
	return c.mgr
}

// LockerOption configures a Locker from Client.Locker, whatever the
// backend.
type LockerOption func(*lockerOptions)

type lockerOptions struct {
	owner string
}

// WithOwner sets the owner stored with every grant of the Locker, so that
// inspection tools (dlock inspect) show who holds the lock: lock.WithOwner
// on etcd, redis.WithOwner on Redis. Optional, defaults to
// "<hostname>/<pid>" on etcd and none on Redis. It must be printable ASCII
// without spaces, at most 256 bytes.
func WithOwner(owner string) LockerOption { return func(o *lockerOptions) { o.owner = owner } }

// Locker returns the lock called name on the Client's backend. The name
// must pass lock.ValidateName. Lockers are cheap; create one per name. On
// etcd its keys live under "<prefix>/lock/".
func (c *Client) Locker(name string, opts ...LockerOption) (lock.Locker, error) {
	if err := c.open(); err != nil {
		return nil, err
	}
	var o lockerOptions
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: locker option %d is nil", ErrInvalidConfig, i)
		}
		opt(&o)
	}
	switch c.cfg.Backend {
	case BackendEtcd:
		lo := c.cfg.lockOptions()
		if o.owner != "" {
			lo = append(lo, lock.WithOwner(o.owner))
		}
		return lock.New(c.mgr, name, lo...)
	}
	ro := c.cfg.redisOptions()
	if o.owner != "" {
		ro = append(ro, redis.WithOwner(o.owner))
	}
	if c.cfg.Backend == BackendRedis {
		return redis.New(c.rdb[0], name, ro...)
	}
	return redis.NewRedlock(c.rdb, name, ro...)
}

// Election returns the election called name, on etcd: its keys live under
// "<prefix>/election/", and it runs on the Client's sessions (a Campaign
// after a session ended runs on a fresh one). On Redis backends it returns
// an error matching errors.ErrUnsupported: Redis has no consensus to elect
// with.
func (c *Client) Election(name string) (*election.Election, error) {
	if err := c.open(); err != nil {
		return nil, err
	}
	if c.cfg.Backend != BackendEtcd {
		return nil, fmt.Errorf("dlock: %s: elections need etcd: %w", c.cfg.Backend, errors.ErrUnsupported)
	}
	return election.New(c.mgr, name, c.cfg.electionOptions()...)
}

// Journal returns an intent journal (package intent) beside the Client's
// locks on etcd: a lock's intents live under "<prefix>/lock/<name>!intent/",
// written in Txns that compare the grant's ownership. Use it with the
// Client's Lockers, for resources that cannot check a fencing token. On
// any other backend it returns an error matching errors.ErrUnsupported: a
// journal needs a linearizable store (use intent.NewEtcd on an etcd
// client, or contrib/pgfence's journal, with intent.New).
func (c *Client) Journal() (*intent.Journal, error) {
	if err := c.open(); err != nil {
		return nil, err
	}
	if c.cfg.Backend != BackendEtcd {
		return nil, fmt.Errorf("dlock: %s: the intent journal needs a linearizable store (etcd, or PostgreSQL through contrib/pgfence): %w", c.cfg.Backend, errors.ErrUnsupported)
	}
	return intent.New(intent.NewEtcd(c.etcd, c.cfg.Prefix+"/lock")), nil
}

func (c *Client) open() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
}

// Close releases everything: for etcd it revokes the session's lease (every
// lock of the Client is released at once) and closes the client; for Redis
// it waits (within ctx) for the background work of its Lockers, such as a
// release still under way on a slow Redlock node, then closes the
// connections (grants still held then expire after their TTL). Close is
// idempotent.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	if c.etcd != nil {
		err := c.mgr.Close(ctx)
		return errors.Join(err, c.etcd.Close())
	}
	return errors.Join(redis.Drain(ctx, c.rdb...), c.closeRedis())
}

func (c *Client) closeRedis() error {
	var errs []error
	for _, r := range c.rdb {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}
