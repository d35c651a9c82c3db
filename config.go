package dlock

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-go/dlock/election"
	"github.com/dlock-go/dlock/internal/names"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/redis"
	"github.com/dlock-go/dlock/session"
	"github.com/dlock-go/dlock/telemetry"
)

// Backend names for Config.Backend.
const (
	BackendEtcd    = "etcd"
	BackendRedis   = "redis"
	BackendRedlock = "redlock"
)

// Defaults for Config's zero fields.
const (
	DefaultPrefix      = "dlock"
	DefaultTTL         = 10 * time.Second
	DefaultDialTimeout = 5 * time.Second
)

// ErrInvalidConfig is returned by ParseDSN, Validate and Open when a DSN or
// Config field is malformed or inconsistent; the message names the field.
var ErrInvalidConfig = errors.New("dlock: invalid config")

// Config selects and configures a backend. The zero value of each optional
// field means its default.
type Config struct {
	// Backend is "etcd", "redis" or "redlock". Required.
	Backend string
	// Endpoints are the servers as host:port: etcd members (one or more),
	// one Redis node, or at least 3 Redlock nodes. Required.
	Endpoints []string
	// Prefix namespaces the keys (etcd: "<prefix>/lock/<name>/…", Redis:
	// "<prefix>:{<name>}"). Optional, defaults to DefaultPrefix ("dlock").
	Prefix string
	// TTL is the etcd session's lease TTL (a whole number of seconds, at
	// least session.MinTTL, 2s) or the Redis lock validity (at least
	// redis.MinTTL, 1s). Optional, defaults to DefaultTTL (10s).
	TTL time.Duration
	// DialTimeout bounds connecting to the servers in Open. Optional,
	// defaults to DefaultDialTimeout (5s).
	DialTimeout time.Duration
	// Username and Password authenticate to etcd or Redis. Optional.
	Username, Password string
	// DB is the Redis database number. Optional, defaults to 0; etcd
	// ignores it.
	DB int
	// MasterName makes a redis backend go through Redis Sentinel: the
	// Endpoints are sentinels, and the lock lives on the master they name
	// MasterName. Optional; "" means a plain node (or a cluster).
	MasterName string
	// Cluster makes a redis backend a Redis Cluster client: the Endpoints
	// are seed nodes. Optional.
	Cluster bool
	// Replicas makes a redis backend's grant count only once that many
	// replicas of its node acknowledged it (redis.WithReplicas(n, 0): the
	// acquire script and WAIT in one round trip; see docs/redis.md for
	// what it closes and what it does not). Optional, defaults to 0 (no
	// confirmation); only for the redis backend.
	Replicas int
	// TLS configures TLS to etcd or Redis: the CA to trust, a client
	// certificate, the server name. Optional; nil means plaintext, unless
	// the DSN's scheme asks for TLS (etcds://, rediss://), in which case
	// ParseDSN fills it in.
	TLS *tls.Config
	// MeterProvider gives the meter of the instruments dlock records
	// (meter "github.com/dlock-go/dlock"). Optional; nil means
	// otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider gives the tracer of dlock's spans (one per acquire).
	// Optional; nil means otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Logger receives dlock's logs: session ends (WARN) and renewals
	// (INFO), lock losses (WARN), grants and releases (DEBUG), on every
	// backend. Optional; nil means discarding.
	Logger *slog.Logger
}

// The options each backend is built with, from one place, so that
// Validate checks exactly what Open and Locker use.
func (c Config) sessionOptions() []session.Option {
	return []session.Option{session.WithTTL(c.TTL), session.WithTelemetry(c.telemetry())}
}

func (c Config) lockOptions() []lock.Option {
	return []lock.Option{lock.WithPrefix(c.Prefix + "/lock"), lock.WithTelemetry(c.telemetry())}
}

func (c Config) electionOptions() []election.Option {
	return []election.Option{election.WithPrefix(c.Prefix + "/election"), election.WithTelemetry(c.telemetry())}
}

func (c Config) telemetry() telemetry.Providers {
	return telemetry.Providers{MeterProvider: c.MeterProvider, TracerProvider: c.TracerProvider, Logger: c.Logger}
}

func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

func (c Config) redisOptions() []redis.Option {
	o := []redis.Option{
		redis.WithTTL(c.TTL),
		redis.WithPrefix(c.Prefix + ":"),
		redis.WithAutoExtend(0),
		redis.WithTelemetry(c.telemetry()),
	}
	if c.Replicas > 0 {
		o = append(o, redis.WithReplicas(c.Replicas, 0))
	}
	return o
}

// checkRedisOptions reports whether redis.New (or NewRedlock) accepts the
// options Locker will pass it, without a server: New contacts no server,
// and calls nothing on a client of a type it does not know. Replicas,
// which New accepts only with a client of go-redis' own types (Open makes
// one), Validate checks itself.
func (c Config) checkRedisOptions() error {
	type unused struct{ goredis.UniversalClient }
	c.Replicas = 0
	if c.Backend == BackendRedis {
		_, err := redis.New(&unused{}, "-", c.redisOptions()...)
		return err
	}
	_, err := redis.NewRedlock([]goredis.UniversalClient{&unused{}, &unused{}, &unused{}}, "-", c.redisOptions()...)
	return err
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	return c
}

// Validate checks the fields against each other. Errors match
// ErrInvalidConfig and name the field.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch c.Backend {
	case BackendEtcd, BackendRedis, BackendRedlock:
	case "":
		return bad("backend is empty (want etcd, redis or redlock)")
	default:
		return bad("backend %q is unknown (want etcd, redis or redlock)", c.Backend)
	}
	if len(c.Endpoints) == 0 {
		return bad("endpoints: none given")
	}
	for _, ep := range c.Endpoints {
		if err := checkHostPort(ep); err != nil {
			return bad("endpoint %q: %v", ep, err)
		}
	}
	switch {
	case c.MasterName != "" && c.Cluster:
		return bad("master_name and cluster: a redis backend is Sentinel or Cluster, not both")
	case (c.MasterName != "" || c.Cluster) && c.Backend != BackendRedis:
		return bad("master_name, cluster: only for the redis backend, not %s", c.Backend)
	case c.Backend == BackendRedis && c.MasterName == "" && !c.Cluster && len(c.Endpoints) != 1:
		return bad("endpoints: redis takes exactly one node, got %d (use redlock for several independent nodes, redis+sentinel:// or redis+cluster:// for a replicated one)", len(c.Endpoints))
	case c.Backend == BackendRedlock && len(c.Endpoints) < 3:
		return bad("endpoints: redlock needs at least 3 independent nodes, got %d", len(c.Endpoints))
	}
	if c.TTL < 0 {
		return bad("ttl %v must be positive", c.TTL)
	}
	if c.DialTimeout < 0 {
		return bad("dial_timeout %v must be positive", c.DialTimeout)
	}
	if c.DB < 0 {
		return bad("db %d must not be negative", c.DB)
	}
	if c.Replicas < 0 {
		return bad("replicas %d must not be negative", c.Replicas)
	}
	if c.Replicas > 0 && c.Backend != BackendRedis {
		return bad("replicas: only for the redis backend (a node, Sentinel or Cluster), not %s", c.Backend)
	}
	if c.DB != 0 && c.Cluster {
		return bad("db %d: Redis Cluster has only database 0", c.DB)
	}
	// A prefix valid on every backend, so that switching the DSN's scheme
	// keeps working; then what Open and Locker would refuse, by the
	// backend's own rules.
	err := names.EtcdPrefix(c.Prefix)
	if err == nil {
		err = names.RedisPrefix(c.Prefix)
	}
	switch {
	case err != nil:
	case c.Backend == BackendEtcd:
		// The constructors Open and Locker call check their options and do
		// no I/O: given a client that is never dialled, they only check.
		var mgr *session.Manager
		if mgr, err = session.NewManager(new(clientv3.Client), c.sessionOptions()...); err == nil {
			_, err = lock.New(mgr, "validate", c.lockOptions()...)
		}
	default:
		err = c.checkRedisOptions()
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

func checkHostPort(ep string) error {
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return err
	}
	if host == "" {
		return errors.New("empty host")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port %q is not a number in 1..65535", port)
	}
	return nil
}
