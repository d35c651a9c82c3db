package main

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/integration/redistest"
)

func TestBench(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	dsn := "etcd://" + hostPort(c.Endpoints()[0])
	r := runCLI(t, "bench", "--dsn", dsn, "--dsn", dsn+"/other", "--clients", "2", "--duration", "3s")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Regexp(t, `bench `+regexp.QuoteMeta(dsn)+`: \ds of 3s, \d+ grants`, r.stderr, "a progress line every second")
	for _, want := range []string{dsn, dsn + "/other", "throughput (grants/s)", "acquire p50", "acquire p99", "handoff p50", "handoff p99"} {
		assert.Contains(t, r.stdout, want)
	}
	assert.NotContains(t, r.stdout, "first error")
	assert.Less(t, r.elapsed, 40*time.Second)
	t.Logf("\n%s", r.stdout)
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	assert.Equal(t, "50ms", pct(ds, 0.50))
	assert.Equal(t, "99ms", pct(ds, 0.99))
	assert.Equal(t, "-", pct(nil, 0.5))
	assert.Equal(t, "etcd://u@h:1/p", redact("etcd://u:secret@h:1/p"))
	assert.Equal(t, "redis://h:1", redact("redis://h:1"))
}

// TestBenchBackends compares etcd, Redis and Redlock side by side.
func TestBenchBackends(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	one := redistest.Start(t)
	three := redistest.StartN(t, 3)
	dsns := []string{
		"etcd://" + hostPort(c.Endpoints()[0]),
		"redis://" + one.Addr(),
		"redlock://" + three[0].Addr() + "," + three[1].Addr() + "," + three[2].Addr(),
	}
	args := []string{"bench", "--clients", "2", "--duration", "1s"}
	for _, d := range dsns {
		args = append(args, "--dsn", d)
	}
	r := runCLI(t, args...)
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	for _, want := range append(dsns, "redis", "redlock", "throughput (grants/s)") {
		assert.Contains(t, r.stdout, want)
	}
	assert.NotContains(t, r.stdout, "first error")
	t.Logf("\n%s", r.stdout)
}
