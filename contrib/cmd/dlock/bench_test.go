package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/etcdtest"
)

func TestBench(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	dsn := "etcd://" + hostPort(c.Endpoints()[0])
	r := runCLI(t, "bench", "--dsn", dsn, "--dsn", dsn+"/other", "--clients", "2", "--duration", "1s")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	for _, want := range []string{dsn, dsn + "/other", "throughput (grants/s)", "acquire p50", "acquire p99", "handoff p50", "handoff p99"} {
		assert.Contains(t, r.stdout, want)
	}
	assert.NotContains(t, r.stdout, "first error")
	assert.Less(t, r.elapsed, 30*time.Second)
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
