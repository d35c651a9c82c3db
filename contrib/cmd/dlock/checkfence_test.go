package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/contrib/s3fence/s3test"
)

// objects returns the keys in bucket.
func objects(t *testing.T, srv *s3test.Server, bucket string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := srv.Client(t).ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	require.NoError(t, err)
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys
}

// check-fence against a real versitygw: every check passes, each printed,
// and the probe objects are gone.
func TestCheckFence(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	r := runCLIEnv(t, srv.Env(), "check-fence", "s3://"+bucket+"/locks/probe")
	require.Equal(t, 0, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	assert.Empty(t, r.stderr)
	for _, check := range []string{"create", "metadata", "create-only", "compare-and-swap", "stale compare-and-swap", "refused writes left no trace", "concurrent fenced writes"} {
		assert.Regexp(t, `(?m)^PASS  `+check+`  +\S`, r.stdout, check)
	}
	assert.NotContains(t, r.stdout, "FAIL")
	assert.Contains(t, r.stdout, "checking s3://"+bucket+"/locks/probe/ at "+srv.Endpoint+", path-style (region us-east-1)")
	assert.Contains(t, r.stdout, "ok: s3://"+bucket+" honours the conditional writes")
	assert.Empty(t, objects(t, srv, bucket), "probe objects left behind")
	t.Logf("dlock check-fence:\n%s", r.stdout)
}

// check-fence through a proxy that drops If-Match and If-None-Match (and
// signs the request again): the store accepts conditional writes and
// ignores them. It fails at the first condition, says so on one line, and
// cleans up.
func TestCheckFenceRefusesStoreIgnoringConditions(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	proxy := s3test.StartProxy(t, srv, s3test.ProxyConfig{Strip: s3test.ConditionHeaders})
	r := runCLIEnv(t, proxy.Env(), "check-fence", "s3://"+bucket)
	require.Equal(t, 1, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	assert.Regexp(t, `(?m)^PASS  create  `, r.stdout)
	assert.Regexp(t, `(?m)^PASS  metadata  `, r.stdout)
	assert.Regexp(t, `(?m)^FAIL  create-only  +a second PUT with If-None-Match: \* on the key is refused with 412$`, r.stdout)
	assert.NotContains(t, r.stdout, "concurrent fenced writes")
	oneLineErr(t, r.stderr)
	assert.Contains(t, r.stderr, "dlock check-fence: s3://"+bucket+" cannot fence writes: s3fence: store does not honour conditional writes: a second PUT with If-None-Match: * on an existing key succeeded")
	assert.NotContains(t, r.stdout, "s3fence:", "the error is printed once, on stderr")
	assert.Empty(t, objects(t, srv, bucket), "probe objects left behind")
	t.Logf("dlock check-fence through the stripping proxy:\nstdout:\n%sstderr: %s", r.stdout, r.stderr)
}

// check-fence through a proxy that drops the checksum headers of the
// store's responses: the AWS SDK, which validates them, logs a WARN line
// to stderr on its own unless it is given a logger; dlock gives it one
// that discards, so stderr stays empty.
func TestCheckFenceQuietSDK(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	target, err := url.Parse(srv.Endpoint)
	require.NoError(t, err)
	stripped := 0
	var mu sync.Mutex
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host // signed by the client
		},
		ModifyResponse: func(resp *http.Response) error {
			for h := range resp.Header {
				if strings.HasPrefix(strings.ToLower(h), "x-amz-checksum-") {
					resp.Header.Del(h)
					mu.Lock()
					stripped++
					mu.Unlock()
				}
			}
			return nil
		},
	})
	t.Cleanup(proxy.Close)
	env := append(srv.Env(), "AWS_ENDPOINT_URL="+proxy.URL)
	r := runCLIEnv(t, env, "check-fence", "s3://"+bucket)
	require.Equal(t, 0, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	mu.Lock()
	assert.Positive(t, stripped, "the store sent checksums, and the proxy dropped them")
	mu.Unlock()
	assert.Empty(t, r.stderr, "no SDK log line")
}

func TestCheckFenceUsage(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "check-fence", "--help")
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.stdout, "Usage: dlock check-fence")
	for _, args := range [][]string{
		{"check-fence"},
		{"check-fence", "s3://a", "s3://b"},
		{"check-fence", "http://bucket/prefix"},
		{"check-fence", "s3:///prefix"},
		{"check-fence", "--writers", "0", "s3://b"},
		{"check-fence", "--writers", "8", "--tokens", "4", "s3://b"},
		{"check-fence", "--timeout", "0s", "s3://b"},
		{"check-fence", "--bogus", "s3://b"},
	} {
		r := runCLI(t, args...)
		assert.Equal(t, 2, r.code, "dlock %q: stderr %q", args, r.stderr)
		oneLineErr(t, r.stderr)
		assert.True(t, strings.HasPrefix(r.stderr, "dlock check-fence: "), r.stderr)
	}
}

// check-fence through a store that checks conditions and then writes, not
// atomically: every sequential check passes, the concurrent one fails.
func TestCheckFenceCatchesNonAtomicStore(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	proxy := s3test.StartProxy(t, srv, s3test.ProxyConfig{CheckThenWrite: 200 * time.Millisecond})
	r := runCLIEnv(t, proxy.Env(), "check-fence", "s3://"+bucket+"/p")
	require.Equal(t, 1, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	for _, check := range []string{"create", "metadata", "create-only", "compare-and-swap", "stale compare-and-swap", "refused writes left no trace"} {
		assert.Regexp(t, `(?m)^PASS  `+check+`  `, r.stdout, check)
	}
	assert.Regexp(t, `(?m)^FAIL  concurrent fenced writes  +\d+ writers, tokens 1\.\.\d+ interleaved: none written after a higher one; the key ends with the highest$`, r.stdout)
	oneLineErr(t, r.stderr)
	assert.Regexp(t, `cannot fence writes: (token \d+ was written after token \d+ had been|right after token \d+ was written|the key ends with token)`, r.stderr)
	assert.Empty(t, objects(t, srv, bucket), "probe objects left behind")
	t.Logf("dlock check-fence on a non-atomic store:\nstdout:\n%sstderr: %s", r.stdout, r.stderr)
}
