package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/redis"
	"github.com/dlock-go/dlock/session"
)

// ErrClosed is returned by Client.Locker after Close.
var ErrClosed = errors.New("dlock: client closed")

// Client is an open connection to one backend. It is safe for concurrent
// use; Close it when done.
type Client struct {
	cfg Config

	etcd *clientv3.Client
	sess *session.Session
	rdb  []goredis.UniversalClient

	mu     sync.Mutex
	closed bool
}

// Open connects to the backend that cfg names. For etcd it also starts the
// Client's session (one lease, one heartbeat loop for all its locks). It
// fails if cfg is invalid, or if the servers cannot be reached before ctx
// ends or cfg.DialTimeout passes (for Redlock: if fewer than a majority
// answer).
func Open(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	c := &Client{cfg: cfg}
	switch cfg.Backend {
	case BackendEtcd:
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   cfg.Endpoints,
			DialTimeout: cfg.DialTimeout,
			Username:    cfg.Username,
			Password:    cfg.Password,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			return nil, fmt.Errorf("dlock: etcd: %w", err)
		}
		s, err := session.New(ctx, cli, cfg.sessionOptions()...)
		if err != nil {
			cli.Close()
			return nil, fmt.Errorf("dlock: etcd %v: %w", cfg.Endpoints, err)
		}
		c.etcd, c.sess = cli, s
	default:
		for _, ep := range cfg.Endpoints {
			c.rdb = append(c.rdb, goredis.NewClient(&goredis.Options{
				Addr:        ep,
				Username:    cfg.Username,
				Password:    cfg.Password,
				DB:          cfg.DB,
				DialTimeout: cfg.DialTimeout,
				// Honour ctx deadlines on reads, so that a stalled node
				// cannot hold a Lock (or a Redlock round) past its ctx.
				ContextTimeoutEnabled: true,
			}))
		}
		if err := c.pingRedis(ctx); err != nil {
			c.closeRedis()
			return nil, err
		}
	}
	return c, nil
}

// pingRedis requires every node (redis) or a majority (redlock) to answer.
func (c *Client) pingRedis(ctx context.Context) error {
	errs := make([]error, len(c.rdb))
	var wg sync.WaitGroup
	for i, r := range c.rdb {
		wg.Go(func() {
			if err := r.Ping(ctx).Err(); err != nil {
				errs[i] = fmt.Errorf("%s: %w", c.cfg.Endpoints[i], err)
			}
		})
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	need := len(c.rdb)
	if c.cfg.Backend == BackendRedlock {
		need = len(c.rdb)/2 + 1
	}
	if len(c.rdb)-failed < need {
		return fmt.Errorf("dlock: %s: %d of %d nodes answer, need %d: %w", c.cfg.Backend, len(c.rdb)-failed, len(c.rdb), need, errors.Join(errs...))
	}
	return nil
}

// Config returns the Client's configuration, defaults filled in.
func (c *Client) Config() Config { return c.cfg }

// Session returns the Client's etcd session, or nil for Redis backends.
func (c *Client) Session() *session.Session { return c.sess }

// Locker returns the lock called name on the Client's backend. The name
// must pass lock.ValidateName. Lockers are cheap; create one per name.
func (c *Client) Locker(name string) (lock.Locker, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	switch c.cfg.Backend {
	case BackendEtcd:
		return lock.New(c.sess, name, c.cfg.lockOptions()...)
	case BackendRedis:
		return redis.New(c.rdb[0], name, c.cfg.redisOptions()...)
	default:
		return redis.NewRedlock(c.rdb, name, c.cfg.redisOptions()...)
	}
}

// Close releases everything: for etcd it revokes the session's lease (every
// lock of the Client is released at once) and closes the client; for Redis
// it closes the connections (held grants then expire after their TTL).
// Close is idempotent.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	if c.etcd != nil {
		err := c.sess.Close(ctx)
		return errors.Join(err, c.etcd.Close())
	}
	return c.closeRedis()
}

func (c *Client) closeRedis() error {
	var errs []error
	for _, r := range c.rdb {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}
