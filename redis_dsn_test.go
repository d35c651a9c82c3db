package dlock_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/integration/tlstest"
	"github.com/dlock-go/dlock/lock"
)

// TestRedisDSNForms opens a Client through every Redis DSN form, against
// real servers of each shape (one node, a Sentinel setup, a Cluster, three
// Redlock nodes; plaintext and TLS), and locks through it; its Election
// fails with an error matching errors.ErrUnsupported.
func TestRedisDSNForms(t *testing.T) {
	t.Parallel()
	certs := tlstest.New(t)
	tlsQuery := func(q url.Values) string {
		q.Set("cacert", certs.CA)
		return q.Encode()
	}
	mutual := url.Values{"cert": {certs.ClientCert}, "key": {certs.ClientKey}, "server_name": {tlstest.ServerName}}

	type form struct{ name, dsn string }
	var forms []form
	for _, secure := range []bool{false, true} {
		var opts []redistest.Option
		s, q := "", ""
		if secure {
			opts = append(opts, redistest.WithTLS(certs))
			s = "s"
		}
		nodes := redistest.StartN(t, 3, opts...)
		st := redistest.StartSentinel(t, opts...)
		cl := redistest.StartCluster(t, 3, opts...)
		if secure {
			q = "&" + tlsQuery(url.Values{})
		}
		forms = append(forms,
			form{"redis" + s, "redis" + s + "://" + nodes[0].Addr() + "/dsn?ttl=5s" + q},
			form{"redis" + s + "+sentinel", "redis" + s + "+sentinel://" + strings.Join(st.Addrs(), ",") + "/dsn?master_name=" + st.MasterName + q},
			form{"redis" + s + "+sentinel with replicas=1", "redis" + s + "+sentinel://" + strings.Join(st.Addrs(), ",") + "/dsn?replicas=1&master_name=" + st.MasterName + q},
			form{"redis" + s + "+cluster", "redis" + s + "+cluster://" + strings.Join(cl.Addrs(), ",") + "/dsn?ttl=5s" + q},
			form{"redlock" + s, "redlock" + s + "://" + nodes[0].Addr() + "," + nodes[1].Addr() + "," + nodes[2].Addr() + "/dsn?ttl=5s" + q},
		)
		if secure {
			forms = append(forms, form{"rediss with a client certificate", "rediss://" + nodes[1].Addr() + "/dsn?" + tlsQuery(mutual)})
		}
	}
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cfg, err := dlock.ParseDSN(f.dsn)
			require.NoError(t, err, f.dsn)
			c, err := dlock.Open(ctx, cfg)
			require.NoError(t, err, f.dsn)
			defer c.Close(ctx)
			l, err := c.Locker("jobs/nightly")
			require.NoError(t, err)
			ran := false
			require.NoError(t, lock.Do(ctx, l, func(ctx context.Context, h lock.Held) error {
				ran = true
				_, err := l.TryLock(ctx)
				assert.ErrorIs(t, err, lock.ErrLocked, "a second grant while held")
				assert.Equal(t, !strings.HasPrefix(f.name, "redlock"), h.Token().Seq != 0, "a fencing token but on redlock")
				return nil
			}))
			assert.True(t, ran)
			h, err := l.TryLock(ctx)
			require.NoError(t, err, "free again after Do")
			require.NoError(t, h.Unlock(ctx))
			_, err = c.Election("leader")
			assert.ErrorIs(t, err, errors.ErrUnsupported, "Redis has no elections")
			assert.ErrorContains(t, err, "elections need etcd")
			_, err = c.Journal()
			assert.ErrorIs(t, err, errors.ErrUnsupported, "no journal on Redis")
			require.NoError(t, c.Close(ctx))
		})
	}
}

// TestParseRedisDSNErrors: a bad Redis DSN is refused with an error that
// names the field.
func TestParseRedisDSNErrors(t *testing.T) {
	t.Parallel()
	certs := tlstest.New(t)
	for dsn, field := range map[string]string{
		"redis+sentinel://s1,s2":                          "master_name",
		"redis+sentinel://s1?master_name=":                "master_name",
		"redis://h?master_name=m":                         "master_name",
		"redlock://a,b,c?master_name=m":                   "master_name",
		"redis+cluster://":                                "hosts",
		"redis+cluster://n1,,n2":                          "empty host",
		"redis+cluster://n1:0":                            "port",
		"redis+cluster://n1,n2?db=1":                      "db",
		"redis+sentinel://s1?master_name=m&db=x":          "db",
		"redis+sentinel://s1?master_name=m&cacert=ca.pem": "cacert",
		"redis://h?cacert=" + certs.CA:                    "cacert",
		"redlock://a,b,c?cert=c.pem":                      "cert",
		"rediss://h?cacert=/nonexistent/ca.pem":           "cacert",
		"rediss://h?cacert=" + certs.ServerKey:            "cacert",
		"rediss://h?cert=" + certs.ClientCert:             "key",
		"rediss+cluster://h?key=" + certs.ClientKey:       "cert",
		"rediss+sentinel://s?master_name=m&server_name=":  "server_name",
		"redis+cluster://n1?ttl=0s":                       "ttl",
		"redis+sentinel://s1?master_name=m&colour=red":    "unknown parameter",
		"redis+cluster+tls://n1":                          "scheme",
		"redlocks://a,b":                                  "at least 3",
		"redis://h/a{b}":                                  "prefix",
		"rediss://h?cert=" + certs.ClientCert + "&key=x":  "cert, key",
		"redis+sentinel://u:%zz@s1?master_name=m":         "password",
	} {
		_, err := dlock.ParseDSN(dsn)
		if assert.Error(t, err, dsn) {
			assert.ErrorIs(t, err, dlock.ErrInvalidConfig, dsn)
			assert.Contains(t, err.Error(), field, dsn)
		}
	}
	// And the forms that parse: Sentinel's default port is 26379.
	cfg, err := dlock.ParseDSN("redis+sentinel://u:p@s1,s2:26380/app?master_name=mymaster&db=2")
	require.NoError(t, err)
	assert.Equal(t, dlock.Config{Backend: "redis", Endpoints: []string{"s1:26379", "s2:26380"}, Prefix: "app",
		MasterName: "mymaster", DB: 2, Username: "u", Password: "p"}, cfg)
	cfg, err = dlock.ParseDSN("redis+cluster://n1,n2:7001,n3/app")
	require.NoError(t, err)
	assert.Equal(t, dlock.Config{Backend: "redis", Endpoints: []string{"n1:6379", "n2:7001", "n3:6379"}, Prefix: "app", Cluster: true}, cfg)
	for dsn, want := range map[string]dlock.Config{
		"redis://h?replicas=1":                         {Backend: "redis", Endpoints: []string{"h:6379"}, Replicas: 1},
		"redis+sentinel://s1?master_name=m&replicas=2": {Backend: "redis", Endpoints: []string{"s1:26379"}, MasterName: "m", Replicas: 2},
		"redis+cluster://n1,n2?replicas=1":             {Backend: "redis", Endpoints: []string{"n1:6379", "n2:6379"}, Cluster: true, Replicas: 1},
		"redis://h?replicas=0":                         {Backend: "redis", Endpoints: []string{"h:6379"}},
	} {
		cfg, err := dlock.ParseDSN(dsn)
		require.NoError(t, err, dsn)
		assert.Equal(t, want, cfg, dsn)
	}
	// Validate refuses what the DSN cannot express.
	for _, c := range []dlock.Config{
		{Backend: "redis", Endpoints: []string{"h:6379"}, Replicas: -1},
		{Backend: "redlock", Endpoints: []string{"a:1", "b:1", "c:1"}, Replicas: 1},
		{Backend: "etcd", Endpoints: []string{"h:2379"}, Replicas: 1},
	} {
		err := c.Validate()
		assert.ErrorIs(t, err, dlock.ErrInvalidConfig, "%+v", c)
		assert.ErrorContains(t, err, "replicas", "%+v", c)
	}
}
