package dlock

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// scheme is what a DSN scheme selects.
type scheme struct {
	backend  string
	tls      bool
	sentinel bool
	cluster  bool
}

// schemeOf returns what the DSN scheme name selects; false if it is unknown.
func schemeOf(name string) (scheme, bool) {
	switch name {
	case "etcd":
		return scheme{backend: BackendEtcd}, true
	case "etcds":
		return scheme{backend: BackendEtcd, tls: true}, true
	case "redis":
		return scheme{backend: BackendRedis}, true
	case "rediss":
		return scheme{backend: BackendRedis, tls: true}, true
	case "redis+sentinel":
		return scheme{backend: BackendRedis, sentinel: true}, true
	case "rediss+sentinel":
		return scheme{backend: BackendRedis, tls: true, sentinel: true}, true
	case "redis+cluster":
		return scheme{backend: BackendRedis, cluster: true}, true
	case "rediss+cluster":
		return scheme{backend: BackendRedis, tls: true, cluster: true}, true
	case "redlock":
		return scheme{backend: BackendRedlock}, true
	case "redlocks":
		return scheme{backend: BackendRedlock, tls: true}, true
	}
	return scheme{}, false
}

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
//	redis://[user:pass@]h:6379[/prefix][?ttl=10s&db=0&dial_timeout=5s]
//	rediss://h:6379[/prefix]?cacert=ca.pem            (the same TLS parameters)
//	redis+sentinel://s1:26379,s2:26379,s3:26379[/prefix]?master_name=mymaster
//	redis+cluster://n1:6379,n2:6379,n3:6379[/prefix]  (seed nodes)
//	redlock://[user:pass@]h1:6379,h2:6379,h3:6379[/prefix][?ttl=10s]
//
// The TLS schemes are etcds, rediss, rediss+sentinel, rediss+cluster and
// redlocks; without cacert they trust the system's roots. cert and key go
// together (a client certificate, for mutual TLS). TLS parameters on a
// plaintext scheme are an error, and so is a file that cannot be read or
// parsed. Ports default to 2379 (etcd), 6379 (Redis) and 26379 (Sentinel).
// Unknown query parameters are errors. The result is validated; errors
// match ErrInvalidConfig and name the field.
func ParseDSN(dsn string) (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: dsn: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	name, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return bad("%q has no scheme (want etcd://, redis:// or redlock://)", RedactDSN(dsn))
	}
	sc, ok := schemeOf(name)
	if !ok {
		return bad("scheme %q is unknown (want etcd, etcds, redis, rediss, redis+sentinel, redis+cluster, redlock or redlocks)", name)
	}
	c := Config{Backend: sc.backend, Cluster: sc.cluster}
	port := defaultRedisPort
	switch {
	case sc.backend == BackendEtcd:
		port = defaultEtcdPort
	case sc.sentinel:
		port = defaultSentinelPort
	}
	if info, after, ok := userinfo(rest); ok {
		rest = after
		user, pass, _ := strings.Cut(info, ":")
		var err error
		if c.Username, err = url.PathUnescape(user); err != nil {
			return bad("username: %v", err)
		}
		if c.Password, err = url.PathUnescape(pass); err != nil {
			return bad("password: not a valid URL escape (escape %%, @, / and ? in a password as %%25, %%40, %%2F and %%3F)")
		}
	}
	rest, rawQuery, _ := strings.Cut(rest, "?")
	authority, path, _ := strings.Cut(rest, "/")
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
	var t tlsFiles
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
		case "master_name":
			if !sc.sentinel {
				return bad("master_name: only for redis+sentinel:// (the scheme is %s://)", name)
			}
			c.MasterName = v
		case "cacert", "cert", "key", "server_name":
			if !sc.tls {
				return bad("%s: TLS parameters need a TLS scheme (%s), not %s://", k, tlsScheme(name), name)
			}
			if v == "" {
				return bad("%s is empty", k)
			}
			t.set(k, v)
		default:
			return bad("unknown parameter %q", k)
		}
	}
	if sc.sentinel && c.MasterName == "" {
		return bad("master_name: redis+sentinel:// needs the master's name (?master_name=mymaster)")
	}
	if sc.tls {
		if c.TLS, err = t.config(); err != nil {
			return bad("%v", err)
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// tlsScheme names the TLS form of a plaintext scheme.
func tlsScheme(scheme string) string {
	switch scheme {
	case "etcd":
		return "etcds://"
	case "redlock":
		return "redlocks://"
	}
	return "rediss" + strings.TrimPrefix(scheme, "redis") + "://"
}

// tlsFiles are the TLS parameters of a DSN.
type tlsFiles struct {
	cacert, cert, key, serverName string
}

func (t *tlsFiles) set(k, v string) {
	switch k {
	case "cacert":
		t.cacert = v
	case "cert":
		t.cert = v
	case "key":
		t.key = v
	case "server_name":
		t.serverName = v
	}
}

// config loads the files into a tls.Config.
func (t *tlsFiles) config() (*tls.Config, error) {
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
