package dlock

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/names"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/redis"
	"github.com/dlock-go/dlock/session"
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
	defaultEtcdPort    = "2379"
	defaultRedisPort   = "6379"
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
	// least 2s) or the Redis lock validity. Optional, defaults to
	// DefaultTTL (10s).
	TTL time.Duration
	// DialTimeout bounds connecting to the servers in Open. Optional,
	// defaults to DefaultDialTimeout (5s).
	DialTimeout time.Duration
	// Username and Password authenticate to etcd or Redis. Optional.
	Username, Password string
	// DB is the Redis database number. Optional, defaults to 0; etcd
	// ignores it.
	DB int
}

// The options each backend is built with, from one place, so that
// Validate checks exactly what Open and Locker use.
func (c Config) sessionOptions() []session.Option {
	return []session.Option{session.WithTTL(c.TTL)}
}

func (c Config) lockOptions() []lock.Option {
	return []lock.Option{lock.WithPrefix(c.Prefix + "/lock")}
}

func (c Config) redisOptions() []redis.Option {
	return []redis.Option{
		redis.WithTTL(c.TTL),
		redis.WithKeyPrefix(c.Prefix + ":"),
		redis.WithAutoExtend(0),
	}
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
	case c.Backend == BackendRedis && len(c.Endpoints) != 1:
		return bad("endpoints: redis takes exactly one node, got %d (use redlock for several)", len(c.Endpoints))
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
		if err = session.ValidateOptions(c.sessionOptions()...); err == nil {
			err = lock.ValidateOptions(c.lockOptions()...)
		}
	case c.Backend == BackendRedis:
		err = redis.ValidateOptions(c.redisOptions()...)
	default:
		err = redis.ValidateRedlockOptions(c.redisOptions()...)
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

// ParseDSN parses a data source name into a Config:
//
//	etcd://[user:pass@]h1:2379,h2:2379[/prefix][?ttl=10s&dial_timeout=5s]
//	redis://[user:pass@]h:6379[/prefix][?ttl=10s&db=0&dial_timeout=5s]
//	redlock://[user:pass@]h1:6379,h2:6379,h3:6379[/prefix][?ttl=10s]
//
// Ports default to 2379 (etcd) and 6379 (Redis). Unknown query parameters
// are errors. The result is validated; errors match ErrInvalidConfig.
func ParseDSN(dsn string) (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: dsn: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return bad("%q has no scheme (want etcd://, redis:// or redlock://)", dsn)
	}
	var c Config
	port := defaultRedisPort
	switch scheme {
	case BackendEtcd:
		port = defaultEtcdPort
	case BackendRedis, BackendRedlock:
	default:
		return bad("scheme %q is unknown (want etcd, redis or redlock)", scheme)
	}
	c.Backend = scheme
	rest, rawQuery, _ := strings.Cut(rest, "?")
	authority, path, _ := strings.Cut(rest, "/")
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		info := authority[:at]
		authority = authority[at+1:]
		user, pass, _ := strings.Cut(info, ":")
		var err error
		if c.Username, err = url.PathUnescape(user); err != nil {
			return bad("username: %v", err)
		}
		if c.Password, err = url.PathUnescape(pass); err != nil {
			return bad("password: %v", err)
		}
	}
	if authority == "" {
		return bad("no hosts")
	}
	for _, h := range strings.Split(authority, ",") {
		if h == "" {
			return bad("empty host in %q", authority)
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), port)
		}
		c.Endpoints = append(c.Endpoints, h)
	}
	c.Prefix = strings.TrimSuffix(path, "/")
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return bad("query: %v", err)
	}
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "ttl":
			if c.TTL, err = time.ParseDuration(v); err != nil || c.TTL <= 0 {
				return bad("ttl %q is not a positive duration (e.g. 10s)", v)
			}
		case "dial_timeout":
			if c.DialTimeout, err = time.ParseDuration(v); err != nil || c.DialTimeout <= 0 {
				return bad("dial_timeout %q is not a positive duration (e.g. 5s)", v)
			}
		case "db":
			if c.DB, err = strconv.Atoi(v); err != nil || c.DB < 0 {
				return bad("db %q is not a database number", v)
			}
		default:
			return bad("unknown parameter %q", k)
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}
