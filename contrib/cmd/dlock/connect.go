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

// etcdFlags are the connection flags of run, elect and inspect.
type etcdFlags struct {
	endpoints   string
	dsn         string
	prefix      string
	ttl         time.Duration
	dialTimeout time.Duration

	username, password string // from --dsn
}

func (f *etcdFlags) register(fs *flagSet, withTTL bool) {
	fs.StringVar(&f.endpoints, "endpoints", defaultEndpoints, "etcd endpoints, comma-separated (host:port or http://host:port)")
	fs.StringVar(&f.dsn, "dsn", "", "etcd DSN, instead of --endpoints: etcd://[user:pass@]h1:2379,h2:2379[/prefix][?ttl=10s&dial_timeout=5s]")
	fs.StringVar(&f.prefix, "prefix", dlock.DefaultPrefix, "etcd key namespace: locks live under <prefix>/lock/<name>/, elections under <prefix>/election/<name>/")
	fs.DurationVar(&f.dialTimeout, "dial-timeout", defaultDialTimeout, "give up connecting to etcd after this long")
	if withTTL {
		fs.DurationVar(&f.ttl, "ttl", session.DefaultTTL, "session TTL: how long after the last heartbeat the lock is released (whole seconds, ≥ 2s)")
	}
}

// resolve applies --dsn over the other flags and checks them.
func (f *etcdFlags) resolve(fs *flagSet) error {
	if f.dsn != "" {
		if isSet(fs, "endpoints") {
			return usageError("--dsn and --endpoints are mutually exclusive")
		}
		cfg, err := dlock.ParseDSN(f.dsn)
		if err != nil {
			return usageError("--dsn: %v", err)
		}
		if cfg.Backend != dlock.BackendEtcd {
			return usageError("--dsn: this command needs etcd (etcd://host:port,...), not %s", cfg.Backend)
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

func (f *etcdFlags) list() []string {
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
func (f *etcdFlags) connect(ctx context.Context) (*clientv3.Client, error) {
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

func (f *etcdFlags) lockPrefix() string     { return f.prefix + "/lock" }
func (f *etcdFlags) electionPrefix() string { return f.prefix + "/election" }

// isSet reports whether the flag called name was given on the command line.
func isSet(fs *flagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
