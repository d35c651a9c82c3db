package dlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redis"
)

// Bad input is refused by ParseDSN, with these messages in full.
func TestParseDSNRefusals(t *testing.T) {
	t.Parallel()
	for dsn, want := range map[string]string{
		"": "dlock: invalid config: dsn: empty (want a scheme and hosts: etcd://h:2379, redis://h:6379 or redlock://h1,h2,h3)",
		"redis://h:6379?ttl=10ms": "dlock: invalid config: redis: invalid option: ttl 10ms is below the minimum 1s: the validity " +
			"(ttl less the drift allowance, 1% + 2ms) must outlast an acquire and a renewal at ttl/3 that each take the node timeout",
		"redlock://a,b,c?ttl=999ms": "dlock: invalid config: redis: invalid option: ttl 999ms is below the minimum 1s: the validity " +
			"(ttl less the drift allowance, 1% + 2ms) must outlast an acquire and a renewal at ttl/3 that each take the node timeout",
		"etcd://h?colour=red":                  `dlock: invalid config: dsn: unknown parameter "colour" (etcd:// takes ttl, dial_timeout)`,
		"etcds://h?size=2&colour=red":          `dlock: invalid config: dsn: unknown parameters "colour", "size" (etcds:// takes ttl, dial_timeout, cacert, cert, key, server_name)`,
		"redis://h?ttl=5s&pool=3":              `dlock: invalid config: dsn: unknown parameter "pool" (redis:// takes db, replicas, ttl, dial_timeout)`,
		"REDIS+SENTINEL://s?master_name=m&x=1": `dlock: invalid config: dsn: unknown parameter "x" (redis+sentinel:// takes db, master_name, replicas, ttl, dial_timeout)`,
		"etcd://h?db=1":                        `dlock: invalid config: dsn: db: only for redis://, redis+sentinel:// and redlock:// (the scheme is etcd://)`,
		"redis+cluster://n1?db=0":              `dlock: invalid config: dsn: db: only for redis://, redis+sentinel:// and redlock:// (the scheme is redis+cluster://)`,
		"Rediss://h?master_name=m":             `dlock: invalid config: dsn: master_name: only for redis+sentinel:// (the scheme is rediss://)`,
		"redis://h?replicas=-1":                `dlock: invalid config: dsn: replicas "-1" is not a number of replicas (0 or more)`,
		"redis+cluster://n1?replicas=one":      `dlock: invalid config: dsn: replicas "one" is not a number of replicas (0 or more)`,
		"redlock://a,b,c?replicas=1":           `dlock: invalid config: dsn: replicas: only for redis://, redis+sentinel:// and redis+cluster:// (the scheme is redlock://)`,
		"etcd://h?replicas=1":                  `dlock: invalid config: dsn: replicas: only for redis://, redis+sentinel:// and redis+cluster:// (the scheme is etcd://)`,
		"Redis://h?server_name=x":              `dlock: invalid config: dsn: server_name: TLS parameters need a TLS scheme (rediss://), not redis://`,
		"ZK://h":                               `dlock: invalid config: dsn: scheme "zk" is unknown (want etcd, etcds, redis, rediss, redis+sentinel, redis+cluster, redlock or redlocks)`,
		"etcd://h?ttl=abc&dial_timeout=x":      `dlock: invalid config: dsn: ttl "abc" is not a positive duration (e.g. 10s)`,
	} {
		_, err := dlock.ParseDSN(dsn)
		if assert.Error(t, err, dsn) {
			assert.ErrorIs(t, err, dlock.ErrInvalidConfig, dsn)
			assert.Equal(t, want, err.Error(), dsn)
		}
	}
}

// Schemes are case-insensitive, as URL schemes are.
func TestParseDSNSchemeCase(t *testing.T) {
	t.Parallel()
	for upper, lower := range map[string]string{
		"ETCD://h1,h2/app?ttl=5s":               "etcd://h1,h2/app?ttl=5s",
		"Redis://h/x?db=2":                      "redis://h/x?db=2",
		"REDLOCKS://a,b,c":                      "redlocks://a,b,c",
		"Redis+Sentinel://s1?master_name=m":     "redis+sentinel://s1?master_name=m",
		"rediss+CLUSTER://n1,n2/app?ttl=1500ms": "rediss+cluster://n1,n2/app?ttl=1500ms",
	} {
		want, err := dlock.ParseDSN(lower)
		require.NoError(t, err, lower)
		got, err := dlock.ParseDSN(upper)
		require.NoError(t, err, upper)
		assert.Equal(t, want, got, upper)
	}
}

// A Redis TTL below redis.MinTTL is refused by Validate (and so by Open)
// too, naming the field; redis.MinTTL itself is accepted.
func TestValidateRedisTTLFloor(t *testing.T) {
	t.Parallel()
	for _, c := range []dlock.Config{
		{Backend: dlock.BackendRedis, Endpoints: []string{"a:1"}},
		{Backend: dlock.BackendRedlock, Endpoints: []string{"a:1", "b:1", "c:1"}},
	} {
		c.TTL = 10 * time.Millisecond
		err := c.Validate()
		assert.ErrorIs(t, err, dlock.ErrInvalidConfig, c.Backend)
		assert.ErrorContains(t, err, "ttl 10ms is below the minimum 1s", c.Backend)
		c.TTL = redis.MinTTL
		assert.NoError(t, c.Validate(), c.Backend)
	}
}
