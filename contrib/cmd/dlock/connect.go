package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

// Defaults for the connection flags.
const (
	defaultEndpoints   = "127.0.0.1:2379"
	defaultDialTimeout = 5 * time.Second
)

// envDSN is the environment variable that is the default of --dsn in every
// subcommand that has one.
const envDSN = "DLOCK_DSN"

// DSN forms, for the flags' help.
const (
	etcdDSNHelp = "etcd://[user:pass@]h1:2379,h2:2379[/prefix][?ttl=10s&dial_timeout=5s], " +
		"etcds://h1:2379[/prefix]?cacert=ca.pem[&cert=client.pem&key=client-key.pem&server_name=NAME] (TLS)"
	redisDSNHelp = "redis://[user:pass@]h:6379[/prefix][?ttl=10s&db=0], rediss://… (TLS, same parameters as etcds), " +
		"redis+sentinel://s1:26379,…?master_name=M, redis+cluster://n1:6379,…, redlock://h1:6379,h2:6379,h3:6379[/prefix][?ttl=10s], redlocks://… (TLS)"
)

// connFlags are the connection flags of run, elect and inspect. elect and
// inspect talk to etcd only; run (anyBackend) takes any backend's DSN.
type connFlags struct {
	anyBackend bool // set before register: --dsn may name redis or redlock

	withTTL     bool   // --ttl is registered
	envDSN      string // $DLOCK_DSN when register ran
	endpoints   string
	dsn         dsnFlag
	prefix      string
	ttl         time.Duration
	dialTimeout time.Duration
}

func (f *connFlags) register(fs *flagSet, e *env, withTTL bool) {
	f.withTTL, f.envDSN = withTTL, e.getenv(envDSN)
	dsnHelp := "etcd DSN, instead of --endpoints (default $" + envDSN + "): " + etcdDSNHelp
	prefixHelp := "etcd key namespace: locks live under <prefix>/lock/<name>/, elections under <prefix>/election/<name>/"
	ttlHelp := "session TTL: how long after the last heartbeat the lock is released (whole seconds, ≥ 2s)"
	if f.anyBackend {
		dsnHelp = "backend DSN, instead of --endpoints (default $" + envDSN + "): " + etcdDSNHelp + ", " + redisDSNHelp
		prefixHelp = "key namespace: etcd locks live under <prefix>/lock/<name>/, Redis locks at <prefix>:{<name>}"
		ttlHelp = "etcd: session TTL, how long after the last heartbeat the lock is released (whole seconds, ≥ 2s); " +
			"redis, redlock: the grant's validity, renewed every TTL/3 while held"
	}
	fs.StringVar(&f.endpoints, "endpoints", defaultEndpoints, "etcd endpoints, comma-separated (host:port or http://host:port), plaintext; for TLS use --dsn etcds://")
	fs.Var(&f.dsn, "dsn", dsnHelp)
	fs.StringVar(&f.prefix, "prefix", dlock.DefaultPrefix, prefixHelp)
	fs.DurationVar(&f.dialTimeout, "dial-timeout", defaultDialTimeout, "give up connecting after this long")
	if withTTL {
		fs.DurationVar(&f.ttl, "ttl", session.DefaultTTL, ttlHelp)
	}
}

// dsnSource returns the DSN to use and where it comes from: --dsn if
// given, else $DLOCK_DSN unless --endpoints is given ("" if neither).
func (f *connFlags) dsnSource(fs *flagSet) (dsn, from string) {
	switch {
	case isSet(fs, "dsn"):
		return string(f.dsn), "--dsn"
	case isSet(fs, "endpoints"):
		return "", ""
	}
	return f.envDSN, "$" + envDSN
}

// config resolves the flags into a dlock.Config: a DSN (--dsn, else
// $DLOCK_DSN) names the backend, else --endpoints are etcd members.
// --prefix, --ttl and --dial-timeout, when given, override the DSN's.
func (f *connFlags) config(fs *flagSet) (dlock.Config, error) {
	cfg := dlock.Config{Backend: dlock.BackendEtcd}
	if dsn, from := f.dsnSource(fs); dsn != "" {
		if from == "--dsn" && isSet(fs, "endpoints") {
			return cfg, usageError("--dsn and --endpoints are mutually exclusive")
		}
		var err error
		if cfg, err = dlock.ParseDSN(dsn); err != nil {
			return cfg, usageError("%s: %v", from, err)
		}
		if !f.anyBackend && cfg.Backend != dlock.BackendEtcd {
			return cfg, usageError("%s: %s works on etcd only (etcd://, etcds://), not %s", from, strings.TrimPrefix(fs.Name(), "dlock "), cfg.Backend)
		}
	} else {
		for _, ep := range f.list() {
			hp := strings.TrimPrefix(ep, "http://")
			if strings.Contains(hp, "://") {
				return cfg, usageError("--endpoints: %q: want host:port or http://host:port (for TLS: --dsn etcds://host:port?cacert=…)", ep)
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
	if f.withTTL && (cfg.TTL == 0 || isSet(fs, "ttl")) {
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
	case cfg.Backend == dlock.BackendEtcd && cfg.TTL != 0:
		if err := checkTTL(cfg.TTL); err != nil {
			return cfg, err
		}
	case cfg.TTL < 0 || f.withTTL && cfg.TTL == 0:
		return cfg, usageError("--ttl %v must be positive", cfg.TTL)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, usageError("%v", err)
	}
	return cfg, nil
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

// open connects to cfg's backend with dlock.Open, which checks within the
// dial timeout that the servers answer (on etcd by starting the Client's
// session). Open explains a failure it can diagnose (nothing listens, TLS
// against plaintext or the reverse, a certificate refused); that
// explanation is kept as it is. Only a bare timeout, which Open could not
// explain (a server that accepts connections and then says nothing), gets
// a generic hint: flags names the flags of the subcommand that set the
// address and the dial timeout.
func open(ctx context.Context, cfg dlock.Config, flags string) (*dlock.Client, error) {
	c, err := dlock.Open(ctx, cfg)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) && !explained(err) {
		wait := cfg.DialTimeout
		if wait == 0 {
			wait = dlock.DefaultDialTimeout
		}
		err = fmt.Errorf("%w (no answer within %v: check the address, and that the server is up; see %s)", err, wait, flags)
	}
	return c, err
}

// connHint names the connection flags of run, elect and inspect, for open.
const connHint = "--dsn, --endpoints, --dial-timeout"

// explained reports whether err carries dlock.Open's diagnosis of a failed
// connection. Open adds it as "<failure> (<diagnosis>)", wrapping the
// failure with %w (see explain in the root package): the one link of the
// chain whose message is the next link's with a parenthesis appended. The
// root exports no marker for it; TestTLSRefused and TestUnreachable pin
// both cases, so a change of that form fails them.
func explained(err error) bool {
	if err == nil {
		return false
	}
	var next []error
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		next = []error{u.Unwrap()}
	case interface{ Unwrap() []error }:
		next = u.Unwrap()
	}
	for _, n := range next {
		if n == nil {
			continue
		}
		if msg := err.Error(); len(next) == 1 && strings.HasPrefix(msg, n.Error()+" (") && strings.HasSuffix(msg, ")") {
			return true
		}
		if explained(n) {
			return true
		}
	}
	return false
}

// etcdLockOptions returns the lock options under which an etcd Semaphore
// or RWMutex of name shares the queue of l, the Client's Locker of name:
// the Client keeps its locks under "<prefix>/lock" (see Client.Locker;
// TestClientLayout pins it).
func etcdLockOptions(client *dlock.Client, name string, l lock.Locker) ([]lock.Option, error) {
	if _, ok := l.(*lock.Mutex); !ok || client.Source() == nil {
		return nil, fmt.Errorf("lock %q: a %T has no etcd queue", name, l)
	}
	return []lock.Option{lock.WithPrefix(client.Config().Prefix + "/lock")}, nil
}

// isSet reports whether the flag called name was given on the command line.
func isSet(fs *flagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// dsnFlag is a --dsn flag. It refuses an empty DSN: --dsn "" is a mistake
// (an unset variable in a script, say), not a request for the default,
// which is what leaving --dsn out gives.
type dsnFlag string

func (f *dsnFlag) String() string { return string(*f) }

func (f *dsnFlag) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		return errEmptyDSN
	}
	*f = dsnFlag(s)
	return nil
}

var errEmptyDSN = errors.New("empty (give a DSN such as etcd://127.0.0.1:2379, or leave --dsn out to use $" + envDSN + " or the default)")
