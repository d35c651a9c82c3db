package dlock

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	defaultEtcdPort     = "2379"
	defaultRedisPort    = "6379"
	defaultSentinelPort = "26379"
)

// ParseDSN parses a data source name into a Config, in the spirit of
// go-redis' ParseURL and etcdctl's flags:
//
//	etcd://[user:pass@]h1:2379,h2:2379[/prefix][?ttl=10s&dial_timeout=5s]
//	etcds://h1:2379,h2:2379[/prefix]?cacert=ca.pem&cert=client.pem&key=client-key.pem[&server_name=etcd.example]
//	redis://[user:pass@]h:6379[/prefix][?ttl=10s&db=0&dial_timeout=5s&replicas=1]
//	rediss://h:6379[/prefix]?cacert=ca.pem            (the same TLS parameters)
//	redis+sentinel://s1:26379,s2:26379,s3:26379[/prefix]?master_name=mymaster[&db=0&replicas=1]
//	redis+cluster://n1:6379,n2:6379,n3:6379[/prefix][?replicas=1]  (seed nodes)
//	redlock://[user:pass@]h1:6379,h2:6379,h3:6379[/prefix][?ttl=10s&db=0]
//
// Schemes are case-insensitive. The TLS schemes are etcds, rediss,
// rediss+sentinel, rediss+cluster and redlocks; without cacert they trust
// the system's roots. cert and key go together (a client certificate, for
// mutual TLS). TLS parameters on a plaintext scheme are an error, and so
// is a file that cannot be read or parsed. Ports default to 2379 (etcd),
// 6379 (Redis) and 26379 (Sentinel). replicas=n makes a grant count only
// once n replicas acknowledged it (Config.Replicas). A parameter the
// scheme does not take is an error that names it, and so is an empty DSN.
// The result is validated; errors match ErrInvalidConfig and name the
// field.
func ParseDSN(dsn string) (Config, error) {
	c, err := parseDSN(dsn)
	if err != nil {
		return Config{}, fmt.Errorf("%w: dsn: %w", ErrInvalidConfig, err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func parseDSN(s string) (Config, error) {
	d, err := splitDSN(s)
	if err != nil {
		return Config{}, err
	}
	switch d.scheme {
	case "etcd":
		return setupEtcd(d)
	case "redis":
		return setupRedis(d)
	case "redis+sentinel":
		return setupSentinel(d)
	case "redis+cluster":
		return setupCluster(d)
	case "redlock":
		return setupRedlock(d)
	}
	return Config{}, fmt.Errorf("scheme %q is unknown (want etcd, etcds, redis, rediss, redis+sentinel, redis+cluster, redlock or redlocks)", d.name)
}

// The setup functions start a Config with what their scheme selects and
// the parameters that only it takes; config adds the rest.

func setupEtcd(d *dsnParts) (Config, error) {
	return d.config(Config{Backend: BackendEtcd}, defaultEtcdPort)
}

func setupRedis(d *dsnParts) (Config, error) {
	return d.config(Config{Backend: BackendRedis, DB: d.q.db(), Replicas: d.q.replicas()}, defaultRedisPort)
}

func setupSentinel(d *dsnParts) (Config, error) {
	c := Config{Backend: BackendRedis, DB: d.q.db(), MasterName: d.q.string("master_name"), Replicas: d.q.replicas()}
	if c.MasterName == "" {
		return c, fmt.Errorf("master_name: %s:// needs the master's name (?master_name=mymaster)", d.name)
	}
	return d.config(c, defaultSentinelPort)
}

func setupCluster(d *dsnParts) (Config, error) {
	return d.config(Config{Backend: BackendRedis, Cluster: true, Replicas: d.q.replicas()}, defaultRedisPort)
}

func setupRedlock(d *dsnParts) (Config, error) {
	return d.config(Config{Backend: BackendRedlock, DB: d.q.db()}, defaultRedisPort)
}

// tlsScheme returns the TLS form of a plaintext scheme: etcds, rediss,
// rediss+sentinel, rediss+cluster, redlocks.
func tlsScheme(plain string) string {
	if rest, ok := strings.CutPrefix(plain, "redis+"); ok {
		return "rediss+" + rest
	}
	return plain + "s"
}

// plainScheme returns the plaintext scheme whose TLS form is name, if name
// is one.
func plainScheme(name string) (string, bool) {
	for _, plain := range []string{"etcd", "redis", "redis+sentinel", "redis+cluster", "redlock"} {
		if tlsScheme(plain) == name {
			return plain, true
		}
	}
	return "", false
}

// dsnParts is a DSN split into its parts, before its scheme reads them.
type dsnParts struct {
	name               string // the scheme, in lower case
	scheme             string // name without the TLS "s": etcd for etcds
	tls                bool   // name is a TLS scheme
	username, password string
	hosts              []string // as given: the port may be missing
	prefix             string
	q                  query
}

// splitDSN splits s into its parts, unescaping the user information.
func splitDSN(s string) (*dsnParts, error) {
	if s == "" {
		return nil, errors.New("empty (want a scheme and hosts: etcd://h:2379, redis://h:6379 or redlock://h1,h2,h3)")
	}
	name, rest, ok := strings.Cut(s, "://")
	if !ok {
		return nil, fmt.Errorf("%q has no scheme (want etcd://, redis:// or redlock://)", RedactDSN(s))
	}
	d := &dsnParts{name: strings.ToLower(name)}
	d.scheme = d.name
	if plain, ok := plainScheme(d.name); ok {
		d.scheme, d.tls = plain, true
	}
	if info, after, ok := userinfo(rest); ok {
		rest = after
		user, pass, _ := strings.Cut(info, ":")
		var err error
		if d.username, err = url.PathUnescape(user); err != nil {
			return nil, fmt.Errorf("username: %v", err)
		}
		if d.password, err = url.PathUnescape(pass); err != nil {
			return nil, errors.New("password: not a valid URL escape (escape %, @, / and ? in a password as %25, %40, %2F and %3F)")
		}
	}
	rest, rawQuery, _ := strings.Cut(rest, "?")
	authority, path, _ := strings.Cut(rest, "/")
	if authority == "" {
		return nil, errors.New("no hosts")
	}
	d.hosts = strings.Split(authority, ",")
	if slices.Contains(d.hosts, "") {
		return nil, fmt.Errorf("empty host in %q", authority)
	}
	d.prefix = strings.TrimSuffix(path, "/")
	v, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, fmt.Errorf("query: %v", err)
	}
	d.q = query{v: v}
	return d, nil
}

// config completes c, which a setup function started with what its
// scheme selects, with what every scheme takes: the hosts (the port
// defaulting to port), the prefix, the user, ttl, dial_timeout and, on a
// TLS scheme, the TLS parameters. A parameter left unread is an error.
func (d *dsnParts) config(c Config, port string) (Config, error) {
	for _, h := range d.hosts {
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), port)
		}
		c.Endpoints = append(c.Endpoints, h)
	}
	c.Prefix, c.Username, c.Password = d.prefix, d.username, d.password
	c.TTL = d.q.duration("ttl", "10s")
	c.DialTimeout = d.q.duration("dial_timeout", "5s")
	if d.tls {
		t := tlsFiles{cacert: d.q.file("cacert"), cert: d.q.file("cert"), key: d.q.file("key"), serverName: d.q.file("server_name")}
		if d.q.err == nil {
			c.TLS, d.q.err = t.config()
		}
	}
	return c, d.q.unread(d.name)
}

// query reads a DSN's parameters, as go-redis' ParseURL does: each read
// takes its parameter out, converted to its type, keeping the first bad
// value's error in err, so that unread can name the parameters no read
// took. A repeated parameter's last value counts.
type query struct {
	v    url.Values
	err  error
	read []string // the names asked for, in order
}

// take returns the named parameter's value, and whether it was given.
func (q *query) take(name string) (string, bool) {
	q.read = append(q.read, name)
	vs, ok := q.v[name]
	if !ok {
		return "", false
	}
	delete(q.v, name)
	return vs[len(vs)-1], true
}

func (q *query) fail(format string, args ...any) {
	if q.err == nil {
		q.err = fmt.Errorf(format, args...)
	}
}

func (q *query) string(name string) string {
	s, _ := q.take(name)
	return s
}

// duration reads a positive duration; example is one, for the message.
func (q *query) duration(name, example string) time.Duration {
	s, ok := q.take(name)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		q.fail("%s %q is not a positive duration (e.g. %s)", name, s, example)
		return 0
	}
	return d
}

// db reads the Redis database number.
func (q *query) db() int { return q.count("db", "a database number") }

// replicas reads the number of replicas that must acknowledge a Redis
// grant.
func (q *query) replicas() int { return q.count("replicas", "a number of replicas (0 or more)") }

// count reads a number, 0 or more; what says what it is, for the message.
func (q *query) count(name, what string) int {
	s, ok := q.take(name)
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		q.fail("%s %q is not %s", name, s, what)
		return 0
	}
	return n
}

// file reads a TLS parameter: a file name, or the server name; given, it
// must not be empty.
func (q *query) file(name string) string {
	s, ok := q.take(name)
	if ok && s == "" {
		q.fail("%s is empty", name)
	}
	return s
}

// unread returns the first bad value's error, or names the parameters no
// read took: one that another scheme takes says which, the others are
// listed with what scheme takes.
func (q *query) unread(scheme string) error {
	if q.err != nil {
		return q.err
	}
	left := slices.Sorted(maps.Keys(q.v))
	for _, name := range left {
		switch name {
		case "cacert", "cert", "key", "server_name":
			return fmt.Errorf("%s: TLS parameters need a TLS scheme (%s://), not %s://", name, tlsScheme(scheme), scheme)
		case "master_name":
			return fmt.Errorf("master_name: only for redis+sentinel:// (the scheme is %s://)", scheme)
		case "db":
			return fmt.Errorf("db: only for redis://, redis+sentinel:// and redlock:// (the scheme is %s://)", scheme)
		case "replicas":
			return fmt.Errorf("replicas: only for redis://, redis+sentinel:// and redis+cluster:// (the scheme is %s://)", scheme)
		}
	}
	if len(left) == 0 {
		return nil
	}
	quoted := make([]string, len(left))
	for i, name := range left {
		quoted[i] = strconv.Quote(name)
	}
	plural := ""
	if len(left) > 1 {
		plural = "s"
	}
	return fmt.Errorf("unknown parameter%s %s (%s:// takes %s)", plural, strings.Join(quoted, ", "), scheme, strings.Join(q.read, ", "))
}

// tlsFiles are the TLS parameters of a DSN.
type tlsFiles struct {
	cacert, cert, key, serverName string
}

// config loads the files into a tls.Config.
func (t tlsFiles) config() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.serverName}
	if t.cacert != "" {
		pem, err := os.ReadFile(t.cacert)
		if err != nil {
			return nil, fmt.Errorf("cacert: %v", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("cacert: %s holds no PEM certificate", t.cacert)
		}
	}
	switch {
	case t.cert != "" && t.key == "":
		return nil, fmt.Errorf("cert: %s is given without key (the client certificate's private key)", t.cert)
	case t.key != "" && t.cert == "":
		return nil, fmt.Errorf("key: %s is given without cert (the client certificate)", t.key)
	case t.cert != "":
		pair, err := tls.LoadX509KeyPair(t.cert, t.key)
		if err != nil {
			return nil, fmt.Errorf("cert, key: %v", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}
