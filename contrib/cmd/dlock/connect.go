package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/session"
)

// Defaults for the etcd connection flags.
const (
	defaultEndpoints   = "127.0.0.1:2379"
	defaultDialTimeout = 5 * time.Second
)

// connFlags are the connection flags of run, elect and inspect. elect and
// inspect talk to etcd only; run (anyBackend) takes any backend's DSN.
type connFlags struct {
	anyBackend bool // set before register: --dsn may name redis or redlock

	endpoints   string
	dsn         string
	prefix      string
	ttl         time.Duration
	dialTimeout time.Duration

	username, password string // from --dsn
}

func (f *connFlags) register(fs *flagSet, withTTL bool) {
	dsnHelp := "etcd DSN, instead of --endpoints: etcd://[user:pass@]h1:2379,h2:2379[/prefix][?ttl=10s&dial_timeout=5s]"
	prefixHelp := "etcd key namespace: locks live under <prefix>/lock/<name>/, elections under <prefix>/election/<name>/"
	ttlHelp := "session TTL: how long after the last heartbeat the lock is released (whole seconds, ≥ 2s)"
	if f.anyBackend {
		dsnHelp = "backend DSN, instead of --endpoints: etcd://[user:pass@]h1:2379,h2:2379[/prefix][?ttl=10s&dial_timeout=5s], " +
			"redis://[user:pass@]h:6379[/prefix][?ttl=10s&db=0], redlock://h1:6379,h2:6379,h3:6379[/prefix][?ttl=10s]"
		prefixHelp = "key namespace: etcd locks live under <prefix>/lock/<name>/, Redis locks at <prefix>:{<name>}"
		ttlHelp = "etcd: session TTL, how long after the last heartbeat the lock is released (whole seconds, ≥ 2s); " +
			"redis, redlock: the grant's validity, renewed every TTL/3 while held"
	}
	fs.StringVar(&f.endpoints, "endpoints", defaultEndpoints, "etcd endpoints, comma-separated (host:port or http://host:port)")
	fs.StringVar(&f.dsn, "dsn", "", dsnHelp)
	fs.StringVar(&f.prefix, "prefix", dlock.DefaultPrefix, prefixHelp)
	fs.DurationVar(&f.dialTimeout, "dial-timeout", defaultDialTimeout, "give up connecting after this long")
	if withTTL {
		fs.DurationVar(&f.ttl, "ttl", session.DefaultTTL, ttlHelp)
	}
}

// config resolves the flags into a dlock.Config for any backend: --dsn
// names the backend, else --endpoints are etcd members. --prefix, --ttl and
// --dial-timeout, when given, override the DSN's.
func (f *connFlags) config(fs *flagSet) (dlock.Config, error) {
	cfg := dlock.Config{Backend: dlock.BackendEtcd}
	if f.dsn != "" {
		if isSet(fs, "endpoints") {
			return cfg, usageError("--dsn and --endpoints are mutually exclusive")
		}
		var err error
		if cfg, err = dlock.ParseDSN(f.dsn); err != nil {
			return cfg, usageError("--dsn: %v", err)
		}
	} else {
		for _, ep := range f.list() {
			hp := strings.TrimPrefix(ep, "http://")
			if strings.Contains(hp, "://") {
				return cfg, usageError("--endpoints: %q: want host:port or http://host:port", ep)
			}
			cfg.Endpoints = append(cfg.Endpoints, hp)
		}
		if len(cfg.Endpoints) == 0 {
			return cfg, usageError("--endpoints is empty")
		}
	}
	if cfg.Prefix == "" || isSet(fs, "prefix") {
		cfg.Prefix = f.prefix
	}
	if cfg.TTL == 0 || isSet(fs, "ttl") {
		cfg.TTL = f.ttl
	}
	if cfg.DialTimeout == 0 || isSet(fs, "dial-timeout") {
		cfg.DialTimeout = f.dialTimeout
	}
	switch {
	case cfg.DialTimeout <= 0:
		return cfg, usageError("--dial-timeout %v must be positive", cfg.DialTimeout)
	case cfg.Prefix == "" || strings.HasSuffix(cfg.Prefix, "/"):
		return cfg, usageError("--prefix %q must be non-empty and must not end with '/'", cfg.Prefix)
	case cfg.Backend == dlock.BackendEtcd:
		if err := checkTTL(cfg.TTL); err != nil {
			return cfg, err
		}
	case cfg.TTL <= 0:
		return cfg, usageError("--ttl %v must be positive", cfg.TTL)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usageError("%v", err)
	}
	return cfg, nil
}

// resolve applies --dsn over the other flags and checks them.
func (f *connFlags) resolve(fs *flagSet) error {
	if f.dsn != "" {
		if isSet(fs, "endpoints") {
			return usageError("--dsn and --endpoints are mutually exclusive")
		}
		cfg, err := dlock.ParseDSN(f.dsn)
		if err != nil {
			return usageError("--dsn: %v", err)
		}
		if cfg.Backend != dlock.BackendEtcd {
			return usageError("--dsn: %s works on etcd only (etcd://host:port,...), not %s", strings.TrimPrefix(fs.Name(), "dlock "), cfg.Backend)
		}
		f.endpoints = strings.Join(cfg.Endpoints, ",")
		f.username, f.password = cfg.Username, cfg.Password
		if cfg.Prefix != "" && !isSet(fs, "prefix") {
			f.prefix = cfg.Prefix
		}
		if cfg.TTL != 0 && !isSet(fs, "ttl") {
			f.ttl = cfg.TTL
		}
		if cfg.DialTimeout != 0 && !isSet(fs, "dial-timeout") {
			f.dialTimeout = cfg.DialTimeout
		}
	}
	if len(f.list()) == 0 {
		return usageError("--endpoints is empty")
	}
	if f.dialTimeout <= 0 {
		return usageError("--dial-timeout %v must be positive", f.dialTimeout)
	}
	if f.prefix == "" || strings.HasSuffix(f.prefix, "/") {
		return usageError("--prefix %q must be non-empty and must not end with '/'", f.prefix)
	}
	return nil
}

func (f *connFlags) list() []string {
	var eps []string
	for _, ep := range strings.Split(f.endpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	return eps
}

// connect dials etcd and checks, within --dial-timeout, that a member
// answers: clientv3 connects lazily, and without this check an unreachable
// endpoint would surface only as a hang in the first request.
func (f *connFlags) connect(ctx context.Context) (*clientv3.Client, error) {
	eps := f.list()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
		DialTimeout: f.dialTimeout,
		Username:    f.username,
		Password:    f.password,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("connect to etcd at %s: %w", strings.Join(eps, ","), err)
	}
	cctx, cancel := context.WithTimeout(ctx, f.dialTimeout)
	defer cancel()
	// A linearizable read of a key nobody uses needs a live quorum.
	if _, err := cli.Get(cctx, "dlock/ping", clientv3.WithCountOnly()); err != nil {
		cli.Close()
		if errors.Is(err, context.DeadlineExceeded) || cctx.Err() != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("etcd at %s: no answer within %v (is it running? see --endpoints, --dial-timeout)", strings.Join(eps, ","), f.dialTimeout)
		}
		return nil, fmt.Errorf("etcd at %s: %w", strings.Join(eps, ","), err)
	}
	return cli, nil
}

func (f *connFlags) lockPrefix() string     { return f.prefix + "/lock" }
func (f *connFlags) electionPrefix() string { return f.prefix + "/election" }

// isSet reports whether the flag called name was given on the command line.
func isSet(fs *flagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
