package dlock_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/lock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseDSN(t *testing.T) {
	cases := map[string]dlock.Config{
		"etcd://h1:2379,h2:2379/app?ttl=5s": {Backend: "etcd", Endpoints: []string{"h1:2379", "h2:2379"}, Prefix: "app", TTL: 5 * time.Second},
		"etcd://h1,h2,h3":                   {Backend: "etcd", Endpoints: []string{"h1:2379", "h2:2379", "h3:2379"}},
		"redis://u:p%40ss@h:6380/x?db=2":    {Backend: "redis", Endpoints: []string{"h:6380"}, Prefix: "x", DB: 2, Username: "u", Password: "p@ss"},
		"redis://h":                         {Backend: "redis", Endpoints: []string{"h:6379"}},
		"redlock://h1,h2,h3,h4,h5?ttl=3s&dial_timeout=1s": {Backend: "redlock", Endpoints: []string{"h1:6379", "h2:6379", "h3:6379", "h4:6379", "h5:6379"},
			TTL: 3 * time.Second, DialTimeout: time.Second},
		"etcd://[::1]:2379/a/b": {Backend: "etcd", Endpoints: []string{"[::1]:2379"}, Prefix: "a/b"},
	}
	for dsn, want := range cases {
		got, err := dlock.ParseDSN(dsn)
		require.NoError(t, err, dsn)
		assert.Equal(t, want, got, dsn)
	}
	bad := map[string]string{
		"":                          "scheme",
		"h1:2379":                   "scheme",
		"zk://h":                    "scheme",
		"etcd://":                   "hosts",
		"etcd://h1,,h2":             "empty host",
		"etcd://h?ttl=abc":          "ttl",
		"etcd://h?ttl=-1s":          "ttl",
		"etcd://h?ttl=1500ms":       "ttl",
		"etcd://h?ttl=1s":           "ttl",
		"etcd://h?colour=red":       "unknown parameter",
		"redis://h1,h2":             "exactly one",
		"redlock://h1,h2":           "at least 3",
		"redis://h?db=x":            "db",
		"redis://h:99999":           "port",
		"redis://h:abc":             "port",
		"etcd://h/{x}":              "prefix",
		"etcd://h/a%25b":            "prefix",
		"redis://h?ttl=1ms":         "ttl",
		"redlock://a,b,c?ttl=100ms": "node timeout",
		"etcd://h?dial_timeout=0s":  "dial_timeout",
	}
	for dsn, field := range bad {
		_, err := dlock.ParseDSN(dsn)
		require.Error(t, err, dsn)
		assert.ErrorIs(t, err, dlock.ErrInvalidConfig, dsn)
		assert.Contains(t, err.Error(), field, dsn)
	}
}

func FuzzParseDSN(f *testing.F) {
	f.Add("etcd://h1:2379,h2:2379/app?ttl=5s")
	f.Add("redis://u:p@h:6379/x?db=1")
	f.Add("redlock://a,b,c")
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
				assert.Equal(t, l.Capabilities().FencingTokens, h.Token().Seq != 0)
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
	assert.True(t, mustLocker(t, etcd).Capabilities().FencingTokens)
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
