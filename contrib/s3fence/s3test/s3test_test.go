package s3test_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/contrib/s3fence/s3test"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// The server stores objects and honours conditional writes: a second
// create-only PUT and a PUT on a stale ETag are refused with 412.
func TestServerHonoursConditions(t *testing.T) {
	ctx := testCtx(t)
	srv := s3test.Start(t)
	c := srv.Client(t)
	bucket := srv.NewBucket(t)

	put := func(body string, in *s3.PutObjectInput) (*s3.PutObjectOutput, error) {
		in.Bucket, in.Key, in.Body = aws.String(bucket), aws.String("k"), strings.NewReader(body)
		return c.PutObject(ctx, in)
	}
	first, err := put("one", &s3.PutObjectInput{IfNoneMatch: aws.String("*")})
	require.NoError(t, err)
	_, err = put("again", &s3.PutObjectInput{IfNoneMatch: aws.String("*")})
	assert.Equal(t, "PreconditionFailed", apiCode(err), "create-only on an existing key: %v", err)
	_, err = put("two", &s3.PutObjectInput{IfMatch: first.ETag})
	require.NoError(t, err)
	_, err = put("stale", &s3.PutObjectInput{IfMatch: first.ETag})
	assert.Equal(t, "PreconditionFailed", apiCode(err), "compare-and-swap on a stale ETag: %v", err)

	got, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("k")})
	require.NoError(t, err)
	b, err := io.ReadAll(got.Body)
	require.NoError(t, got.Body.Close())
	require.NoError(t, err)
	assert.Equal(t, "two", string(b))
}

// Through a stripping proxy the same requests authenticate (the proxy signs
// them again) and every condition is ignored. Control: the stripped
// headers are signed by the client, so forwarding without them and
// without signing again is refused.
func TestProxyStripsConditions(t *testing.T) {
	ctx := testCtx(t)
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	c := s3test.StartProxy(t, srv, s3test.ProxyConfig{Strip: s3test.ConditionHeaders}).Client(t)

	put := func(body string, in *s3.PutObjectInput) error {
		in.Bucket, in.Key, in.Body = aws.String(bucket), aws.String("k"), strings.NewReader(body)
		_, err := c.PutObject(ctx, in)
		return err
	}
	require.NoError(t, put("one", &s3.PutObjectInput{IfNoneMatch: aws.String("*")}))
	assert.NoError(t, put("again", &s3.PutObjectInput{IfNoneMatch: aws.String("*")}), "create-only ignored")
	assert.NoError(t, put("stale", &s3.PutObjectInput{IfMatch: aws.String(`"0123456789abcdef0123456789abcdef"`)}), "compare-and-swap ignored")

	// Control: drop the header without signing again. The same proxy
	// passes requests that carry no condition.
	var dropped atomic.Int32
	dropOnly := s3test.StartProxy(t, srv, s3test.ProxyConfig{Wrap: func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Header.Get("If-None-Match") != "" {
				r = r.Clone(r.Context())
				r.Header.Del("If-None-Match")
				dropped.Add(1)
			}
			return next.RoundTrip(r)
		})
	}}).Client(t)
	put2 := func(in *s3.PutObjectInput) error {
		in.Bucket, in.Key, in.Body = aws.String(bucket), aws.String("k2"), strings.NewReader("x")
		_, err := dropOnly.PutObject(ctx, in)
		return err
	}
	require.NoError(t, put2(&s3.PutObjectInput{}), "a request without conditions, forwarded as it is")
	err := put2(&s3.PutObjectInput{IfNoneMatch: aws.String("*")})
	assert.Equal(t, "SignatureDoesNotMatch", apiCode(err), "a signed header dropped: %v", err)
	assert.Equal(t, int32(1), dropped.Load())
}

func TestStopIsIdempotent(t *testing.T) {
	srv, err := s3test.StartServer(testCtx(t))
	if errors.Is(err, s3test.ErrNotInstalled) {
		s3test.Start(t) // skips, or fails under DLOCK_REQUIRE
	}
	require.NoError(t, err)
	require.NoError(t, srv.Stop())
	assert.True(t, srv.Exited())
	require.NoError(t, srv.Stop(), "Stop is idempotent")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The check-then-write proxy honours conditions one request at a time, and
// lets two concurrent create-only PUTs of one key both succeed.
func TestCheckThenWriteProxy(t *testing.T) {
	ctx := testCtx(t)
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	c := s3test.StartProxy(t, srv, s3test.ProxyConfig{CheckThenWrite: 10 * time.Second}).Client(t)
	put := func(key, body string, in *s3.PutObjectInput) (*s3.PutObjectOutput, error) {
		in.Bucket, in.Key, in.Body = aws.String(bucket), aws.String(key), strings.NewReader(body)
		return c.PutObject(ctx, in)
	}

	// One at a time (each waits out the window for a partner that does
	// not come; a short window keeps this quick).
	seq := s3test.StartProxy(t, srv, s3test.ProxyConfig{CheckThenWrite: 50 * time.Millisecond}).Client(t)
	first, err := seq.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("seq"), Body: strings.NewReader("1"), IfNoneMatch: aws.String("*")})
	require.NoError(t, err)
	_, err = seq.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("seq"), Body: strings.NewReader("2"), IfNoneMatch: aws.String("*")})
	assert.Equal(t, "PreconditionFailed", apiCode(err), "create-only, sequential: %v", err)
	_, err = seq.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("seq"), Body: strings.NewReader("3"), IfMatch: first.ETag})
	require.NoError(t, err)
	_, err = seq.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("seq"), Body: strings.NewReader("4"), IfMatch: first.ETag})
	assert.Equal(t, "PreconditionFailed", apiCode(err), "stale compare-and-swap, sequential: %v", err)

	// Two at once: both pass their check before either writes.
	errs := make(chan error, 2)
	for _, body := range []string{"a", "b"} {
		go func() {
			_, err := put("race", body, &s3.PutObjectInput{IfNoneMatch: aws.String("*")})
			errs <- err
		}()
	}
	assert.NoError(t, <-errs)
	assert.NoError(t, <-errs, "two create-only PUTs of one key both succeeded")
}
