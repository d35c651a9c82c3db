package dlock_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/integration/tlstest"
	"github.com/dlock-go/dlock/internal/leaktest"
	"github.com/dlock-go/dlock/lock"
)

// TestMain checks with goleak that no goroutine outlives the tests, giving
// go-redis's pools, which probe refused addresses, time to see their Close.
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

func TestParseDSN(t *testing.T) {
	t.Parallel()
	cases := map[string]dlock.Config{
		"etcd://h1:2379,h2:2379/app?ttl=5s": {Backend: "etcd", Endpoints: []string{"h1:2379", "h2:2379"}, Prefix: "app", TTL: 5 * time.Second},
		"etcd://h1,h2,h3":                   {Backend: "etcd", Endpoints: []string{"h1:2379", "h2:2379", "h3:2379"}},
		"redis://u:p%40ss@h:6380/x?db=2":    {Backend: "redis", Endpoints: []string{"h:6380"}, Prefix: "x", DB: 2, Username: "u", Password: "p@ss"},
		"redis://h":                         {Backend: "redis", Endpoints: []string{"h:6379"}},
		"redlock://h1,h2,h3,h4,h5?ttl=3s&dial_timeout=1s": {Backend: "redlock", Endpoints: []string{"h1:6379", "h2:6379", "h3:6379", "h4:6379", "h5:6379"},
			TTL: 3 * time.Second, DialTimeout: time.Second},
		"etcd://[::1]:2379/a/b": {Backend: "etcd", Endpoints: []string{"[::1]:2379"}, Prefix: "a/b"},
		"redis+sentinel://s1,s2:26380,s3/app?master_name=mymaster": {Backend: "redis", Endpoints: []string{"s1:26379", "s2:26380", "s3:26379"}, Prefix: "app", MasterName: "mymaster"},
		"redis+cluster://n1,n2,n3/app":                             {Backend: "redis", Endpoints: []string{"n1:6379", "n2:6379", "n3:6379"}, Prefix: "app", Cluster: true},
	}
	for dsn, want := range cases {
		got, err := dlock.ParseDSN(dsn)
		require.NoError(t, err, dsn)
		assert.Equal(t, want, got, dsn)
	}
	bad := map[string]string{
		"":                                     "scheme",
		"h1:2379":                              "scheme",
		"zk://h":                               "scheme",
		"etcd://":                              "hosts",
		"etcd://h1,,h2":                        "empty host",
		"etcd://h?ttl=abc":                     "ttl",
		"etcd://h?ttl=-1s":                     "ttl",
		"etcd://h?ttl=1500ms":                  "ttl",
		"etcd://h?ttl=1s":                      "ttl",
		"etcd://h?colour=red":                  "unknown parameter",
		"redis://h1,h2":                        "exactly one",
		"redlock://h1,h2":                      "at least 3",
		"redis://h?db=x":                       "db",
		"redis://h:99999":                      "port",
		"redis://h:abc":                        "port",
		"etcd://h/{x}":                         "prefix",
		"etcd://h/a%25b":                       "prefix",
		"redis://h?ttl=1ms":                    "ttl",
		"redlock://a,b,c?ttl=100ms":            "ttl 100ms is below the minimum 1s",
		"etcd://h?dial_timeout=0s":             "dial_timeout",
		"etcd://h?cacert=ca.pem":               "TLS parameters need a TLS scheme (etcds://)",
		"redis://h?cert=c.pem":                 "TLS parameters need a TLS scheme (rediss://)",
		"redlock://a,b,c?key=k":                "TLS parameters need a TLS scheme (redlocks://)",
		"redis+cluster://a?cacert=x":           "TLS parameters need a TLS scheme (rediss+cluster://)",
		"etcds://h?cacert=":                    "cacert is empty",
		"etcds://h?server_name=":               "server_name is empty",
		"etcds://h?cacert=/nonexistent/ca.pem": "cacert",
		"etcds://h?cert=/x/client.pem":         "without key",
		"etcds://h?key=/x/client-key.pem":      "without cert",
		"etcds://h?cert=/nonexistent/c.pem&key=/nonexistent/k": "cert, key",
		"etcds://h?colour=red":                                 "unknown parameter",
		"redis+sentinel://s1,s2,s3":                            "master_name",
		"redis://h?master_name=m":                              "master_name: only for redis+sentinel",
		"redis+cluster://a,b?master_name=m":                    "master_name: only for redis+sentinel",
	}
	for dsn, field := range bad {
		_, err := dlock.ParseDSN(dsn)
		require.Error(t, err, dsn)
		assert.ErrorIs(t, err, dlock.ErrInvalidConfig, dsn)
		assert.Contains(t, err.Error(), field, dsn)
	}
}

// TLS schemes load the files named in the DSN into Config.TLS.
func TestParseDSNTLS(t *testing.T) {
	t.Parallel()
	certs := tlstest.New(t)
	c, err := dlock.ParseDSN("etcds://h1,h2/app?cacert=" + certs.CA + "&cert=" + certs.ClientCert + "&key=" + certs.ClientKey + "&server_name=etcd.example")
	require.NoError(t, err)
	assert.Equal(t, []string{"h1:2379", "h2:2379"}, c.Endpoints)
	require.NotNil(t, c.TLS)
	assert.Equal(t, "etcd.example", c.TLS.ServerName)
	assert.NotNil(t, c.TLS.RootCAs)
	assert.Len(t, c.TLS.Certificates, 1)
	for _, dsn := range []string{"rediss://h/x", "redlocks://a,b,c", "rediss+sentinel://s?master_name=m", "rediss+cluster://a,b"} {
		c, err := dlock.ParseDSN(dsn)
		require.NoError(t, err, dsn)
		require.NotNil(t, c.TLS, "%s: system roots", dsn)
		assert.Nil(t, c.TLS.RootCAs, dsn)
	}
	_, err = dlock.ParseDSN("etcds://h?cacert=" + certs.ClientKey)
	assert.ErrorContains(t, err, "holds no PEM certificate")
	_, err = dlock.ParseDSN("etcds://h?cert=" + certs.ClientCert + "&key=" + certs.ServerKey)
	assert.ErrorContains(t, err, "cert, key")
}

func FuzzParseDSN(f *testing.F) {
	f.Add("etcd://h1:2379,h2:2379/app?ttl=5s")
	f.Add("redis://u:p@h:6379/x?db=1")
	f.Add("redlock://a,b,c")
	f.Add("etcds://h1,h2/app?server_name=etcd.example")
	f.Add("rediss://h/x?cacert=ca.pem&cert=c.pem&key=k.pem")
	f.Add("redis+sentinel://s1,s2/p?master_name=m")
	f.Add("redis+cluster://n1,n2,n3/p")
	f.Add("redlocks://a,b,c?ttl=3s")
	f.Add("ETCD://h?ttl=2s&colour=red")
	f.Add("Redis://u:p%40@h?db=1&ttl=999ms")
	f.Add("")
	f.Fuzz(func(t *testing.T, dsn string) {
		c, err := dlock.ParseDSN(dsn)
		if err != nil {
			if !strings.Contains(err.Error(), "dlock: invalid config") {
				t.Fatalf("error %q does not match ErrInvalidConfig", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseDSN(%q) returned a config that does not validate: %v", dsn, err)
		}
	})
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]dlock.Config{
		"backend":   {Endpoints: []string{"h:1"}},
		"unknown":   {Backend: "consul", Endpoints: []string{"h:1"}},
		"endpoints": {Backend: "etcd"},
		"endpoint":  {Backend: "etcd", Endpoints: []string{"nohostport"}},
		"ttl":       {Backend: "redis", Endpoints: []string{"h:1"}, TTL: -time.Second},
	} {
		err := c.Validate()
		assert.ErrorIs(t, err, dlock.ErrInvalidConfig, name)
		assert.Contains(t, err.Error(), strings.TrimSuffix(name, "s"), name)
	}
}

// The same application code runs on every backend; only the DSN changes.
func TestSwitchBackends(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t)
	rs := redistest.StartN(t, 3)
	dsns := map[string]string{
		"etcd":    "etcd://" + strings.TrimPrefix(etcd.Endpoints()[0], "http://") + "/switch?ttl=5s",
		"redis":   "redis://" + rs[0].Addr() + "/switch?ttl=5s",
		"redlock": "redlock://" + rs[0].Addr() + "," + rs[1].Addr() + "," + rs[2].Addr() + "/switch?ttl=5s",
	}
	for backend, dsn := range dsns {
		t.Run(backend, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cfg, err := dlock.ParseDSN(dsn)
			require.NoError(t, err)
			c, err := dlock.Open(ctx, cfg)
			require.NoError(t, err)
			defer c.Close(ctx)
			l, err := c.Locker("jobs/nightly")
			require.NoError(t, err)
			ran := false
			require.NoError(t, lock.Do(ctx, l, func(ctx context.Context, h lock.Held) error {
				ran = true
				_, err := l.TryLock(ctx)
				assert.ErrorIs(t, err, lock.ErrLocked)
				// One message shape on every backend: pkg: "name": op: cause.
				assert.Regexp(t, `^(lock|redis): "jobs/nightly": try lock: `, err.Error())
				assert.Equal(t, backend != "redlock", h.Token().Seq != 0, "a fencing token on etcd and redis, none on redlock")
				return nil
			}))
			assert.True(t, ran)
			_, err = c.Locker("bad//name")
			assert.ErrorIs(t, err, lock.ErrInvalidName)
			require.NoError(t, c.Close(ctx))
			require.NoError(t, c.Close(ctx), "Close is idempotent")
			_, err = c.Locker("x")
			assert.ErrorIs(t, err, dlock.ErrClosed)
		})
	}
}

func mustLocker(t *testing.T, etcd *etcdtest.Cluster) lock.Locker {
	t.Helper()
	c, err := dlock.Open(t.Context(), dlock.Config{Backend: "etcd", Endpoints: []string{strings.TrimPrefix(etcd.Endpoints()[0], "http://")}})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(context.Background()) })
	l, err := c.Locker("caps")
	require.NoError(t, err)
	return l
}

// An unreachable endpoint fails Open within the dial timeout.
func TestOpenUnreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	for _, dsn := range []string{"etcd://" + addr + "?dial_timeout=500ms", "redis://" + addr + "?dial_timeout=500ms"} {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		_, err := dlock.Open(ctx, mustParse(t, dsn))
		assert.Error(t, err, dsn)
		assert.NoError(t, ctx.Err(), "Open must give up on its own dial timeout: %s", dsn)
		cancel()
	}
}

func mustParse(t *testing.T, dsn string) dlock.Config {
	t.Helper()
	c, err := dlock.ParseDSN(dsn)
	require.NoError(t, err)
	return c
}
