package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/integration/redistest"
)

func TestBench(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	dsn := "etcd://" + hostPort(c.Endpoints()[0])
	r := runCLI(t, "bench", "--dsn", dsn, "--dsn", dsn+"/other", "--clients", "2", "--duration", "3s", "--progress")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Regexp(t, `bench `+regexp.QuoteMeta(dsn)+`: \ds of 3s, \d+ grants`, r.stderr, "a progress line every second")
	for _, want := range []string{dsn, dsn + "/other", "throughput (grants/s)", "acquire p50", "acquire p90", "acquire p99", "acquire max",
		"handoff p50", "handoff p90", "handoff p99", dsn + ": acquire latency histogram (", dsn + "/other: acquire latency histogram ("} {
		assert.Contains(t, r.stdout, want)
	}
	assert.Regexp(t, `(?m)^\s+<= \d+(µs|ms|s) \|#+ *\| [1-9]\d*$`, r.stdout, "a histogram bar")
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
	assert.Equal(t, "etcd://u:xxxxx@h:1/p", dlock.RedactDSN("etcd://u:secret@h:1/p"))
	assert.Equal(t, "redis://h:1", dlock.RedactDSN("redis://h:1"))
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

// TestBenchJSON: --json prints one object per backend with sane fields,
// and without --progress a pipe gets no progress lines.
func TestBenchJSON(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	one := redistest.Start(t)
	dsns := []string{"etcd://" + hostPort(c.Endpoints()[0]) + "/benchjson", "redis://" + one.Addr()}
	r := runCLI(t, "bench", "--json", "--clients", "2", "--duration", "1500ms", "--dsn", dsns[0], "--dsn", dsns[1])
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Empty(t, r.stderr, "no progress lines unless stderr is a terminal or --progress")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, r.stdout)
	for i, l := range lines {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &rec), l)
		for _, k := range []string{"backend", "dsn", "ops", "errors", "duration_s", "throughput", "p50_ms", "p90_ms", "p99_ms", "max_ms", "histogram"} {
			assert.Contains(t, rec, k, "line %d", i)
		}
		var b benchRecord
		require.NoError(t, json.Unmarshal([]byte(l), &b), l)
		assert.Equal(t, []string{"etcd", "redis"}[i], b.Backend)
		assert.Equal(t, dsns[i], b.DSN)
		assert.Equal(t, 2, b.Clients)
		assert.Positive(t, b.Ops)
		assert.Zero(t, b.Errors, b.FirstError)
		assert.Positive(t, b.DurationS)
		assert.InDelta(t, float64(b.Ops)/b.DurationS, b.Throughput, 1e-6*b.Throughput)
		assert.Positive(t, b.P50MS)
		assert.True(t, b.P50MS <= b.P90MS && b.P90MS <= b.P99MS && b.P99MS <= b.MaxMS, "%+v", b)
		n := 0
		for j, bk := range b.Histogram {
			n += bk.Count
			if j < len(b.Histogram)-1 {
				require.NotNil(t, bk.LeMS, "only the last bucket is unbounded")
			}
			if j > 0 && bk.LeMS != nil {
				assert.Greater(t, *bk.LeMS, *b.Histogram[j-1].LeMS, "buckets ascend")
			}
		}
		assert.Equal(t, b.Ops, n, "the histogram counts every grant")
		require.GreaterOrEqual(t, len(b.Histogram), 2)
		assert.Nil(t, b.Histogram[len(b.Histogram)-1].LeMS, "the last bucket is the unbounded one, as documented")
		if le := b.Histogram[len(b.Histogram)-2].LeMS; b.Histogram[len(b.Histogram)-1].Count == 0 {
			assert.LessOrEqual(t, b.MaxMS, *le, "an empty unbounded bucket: the max is in the bucket before")
		}
	}
}

// TestBenchReportsEveryBackend: a backend that cannot be reached does not
// discard the result of one that ran; the failure names its DSN
// (redacted) and only flags bench has, and bench exits 1.
func TestBenchReportsEveryBackend(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	live := "etcd://" + hostPort(c.Endpoints()[0])
	dead := etcdtest.FreeAddr(t) // free a moment ago: nothing listens there
	for _, asJSON := range []bool{false, true} {
		args := []string{"bench", "--clients", "2", "--duration", "1s", "--dsn", live, "--dsn", "etcd://u:secret@" + dead + "?dial_timeout=2s"}
		if asJSON {
			args = append(args, "--json")
		}
		r := runCLI(t, args...)
		assert.Equal(t, exitError, r.code, "stderr: %s", r.stderr)
		oneLineErr(t, r.stderr)
		assert.True(t, strings.HasPrefix(r.stderr, "dlock bench: etcd://u:xxxxx@"+dead+"?dial_timeout=2s: "), "the failure names its DSN: %s", r.stderr)
		for _, not := range []string{"secret", "--endpoints", "--dial-timeout", "within 0s"} {
			assert.NotContains(t, r.stderr, not)
		}
		if asJSON {
			var b benchRecord
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &b), r.stdout)
			assert.Equal(t, live, b.DSN)
			assert.Positive(t, b.Ops)
		} else {
			assert.Contains(t, r.stdout, live+": acquire latency histogram (")
			assert.NotContains(t, r.stdout, dead)
		}
		t.Logf("dlock %s\nstdout:\n%sstderr: %s", strings.Join(args[1:], " "), r.stdout, r.stderr)
	}
}

func TestHistogram(t *testing.T) {
	ds := []time.Duration{150 * time.Microsecond, 180 * time.Microsecond, 3 * time.Millisecond, 5 * time.Millisecond, time.Minute}
	var got []string
	for _, b := range histogram(ds) {
		got = append(got, fmt.Sprintf("%v:%d", b.le, b.count))
	}
	// 1-2-5 buckets: (100µs, 200µs], then 500µs, 1ms, 2ms empty, (2ms,
	// 5ms] holds 3ms and 5ms, ..., and one unbounded bucket above 50s.
	assert.Equal(t, "200µs:2", got[0])
	assert.Equal(t, []string{"500µs:0", "1ms:0", "2ms:0", "5ms:2"}, got[1:5])
	assert.Equal(t, "0s:1", got[len(got)-1])
	assert.Nil(t, histogram(nil))

	var out strings.Builder
	printHistogram(&out, histogram(ds))
	assert.Contains(t, out.String(), "<= 200µs |"+strings.Repeat("#", histWidth)+"| 2")
	assert.Contains(t, out.String(), "<= 500µs |"+strings.Repeat(" ", histWidth)+"| 0")
	assert.Contains(t, out.String(), "> 50s |"+strings.Repeat("#", histWidth/2)+strings.Repeat(" ", histWidth/2)+"| 1")

	rec := benchResult{label: dlock.RedactDSN("redis://u:secret@h:1"), backend: "redis", clients: 1, elapsed: 2 * time.Second, acquire: ds}.record()
	assert.Equal(t, "redis://u:xxxxx@h:1", rec.DSN)
	assert.Equal(t, 5, rec.Ops)
	assert.Equal(t, 2.5, rec.Throughput)
	assert.Equal(t, 3.0, rec.P50MS)
	assert.Equal(t, 60000.0, rec.MaxMS)
	assert.Nil(t, rec.Histogram[len(rec.Histogram)-1].LeMS)
	assert.Equal(t, 0.2, *rec.Histogram[0].LeMS)
}
