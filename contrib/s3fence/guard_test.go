package s3fence_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/telemetry"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/dlock-go/dlock/contrib/s3fence"
	"github.com/dlock-go/dlock/contrib/s3fence/s3test"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/fencetest"
	"github.com/dlock-go/dlock/integration/oteltest"
)

func TestNewValidates(t *testing.T) {
	ctx := testCtx(t)
	_, err := s3fence.New(ctx, nil, "b")
	require.ErrorIs(t, err, s3fence.ErrInvalidArgument)
	assert.ErrorContains(t, err, "client is nil")

	c := s3.New(s3.Options{Region: s3test.Region}) // never used
	_, err = s3fence.New(ctx, c, "")
	require.ErrorIs(t, err, s3fence.ErrInvalidArgument)
	assert.ErrorContains(t, err, "bucket is empty")
	for _, bad := range []struct {
		opt  s3fence.Option
		want string
	}{
		{s3fence.WithMaxAttempts(0), "WithMaxAttempts(0)"},
		{s3fence.WithAttemptTimeout(-1), "WithAttemptTimeout"},
		{s3fence.WithProbePrefix(""), "WithProbePrefix"},
		{nil, "nil Option"},
	} {
		_, err = s3fence.New(ctx, c, "b", bad.opt)
		require.ErrorIs(t, err, s3fence.ErrInvalidArgument)
		assert.ErrorContains(t, err, bad.want)
	}
}

// The seed's timeline at an object store: A (token 41) writes and pauses,
// B (42) writes, A's late write is rejected and B's object stands.
func TestSeedTimeline(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	g := e.guard(t)
	a := fence.Token{Name: "accounts/7", Seq: 41}
	b := fence.Token{Name: "accounts/7", Seq: 42}
	const key = "accounts/7/owner"

	require.NoError(t, g.Put(ctx, a, key, strings.NewReader("A")))
	require.NoError(t, g.Put(ctx, b, key, strings.NewReader("B")))
	err := g.Put(ctx, a, key, strings.NewReader("A after the pause"))
	var stale *fence.StaleTokenError
	require.ErrorAs(t, err, &stale)
	assert.Equal(t, fence.StaleTokenError{Name: "accounts/7", Seq: 41, Highest: 42}, *stale)
	assert.Equal(t, "B", get(t, e, key))
	tok, err := g.Token(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, b, tok)

	// Control: the same late write without the guard overwrites B.
	_, err = e.client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(e.bucket), Key: aws.String(key), Body: strings.NewReader("A after the pause")})
	require.NoError(t, err)
	assert.Equal(t, "A after the pause", get(t, e, key))
}

// The suite checks the marks through the adapter; the data must follow:
// under the suite's concurrent load through Put, each token writing its
// own content, the object ends with the highest token's content.
func TestConcurrentPutsLandInTokenOrder(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	g := e.guard(t)
	const name, key = "hot", "hot/data"
	admitted, stale := fencetest.Interleave(t, func(seq uint64) error {
		return g.Put(ctx, fence.Token{Name: name, Seq: seq}, key, strings.NewReader(strconv.FormatUint(seq, 10)))
	})
	assert.Equal(t, strconv.Itoa(fencetest.Top), get(t, e, key), "a lower Put landed after the highest one")
	tok, err := g.Token(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, uint64(fencetest.Top), tok.Seq)
	assert.Positive(t, stale)
	t.Logf("admitted %d, stale %d", admitted, stale)
}

func TestPutRejectsBadArguments(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	g := e.guard(t)
	for _, b := range fencetest.BadTokens {
		assert.ErrorIs(t, g.Put(ctx, b.Token, "k", strings.NewReader("v")), b.Want, "Put(%#v)", b.Token)
	}
	err := g.Put(ctx, fence.Token{Name: "n", Seq: 1}, "", strings.NewReader("v"))
	assert.ErrorIs(t, err, s3fence.ErrInvalidArgument)
	assert.ErrorContains(t, err, "key is empty")
	_, err = g.Token(ctx, "")
	assert.ErrorIs(t, err, s3fence.ErrInvalidArgument)
	_, err = g.Landed(ctx, "k", "")
	assert.ErrorIs(t, err, s3fence.ErrInvalidArgument)
	assert.Empty(t, list(t, e), "nothing was written")
}

// An equal token is admitted (one holder writes many times), also with the
// same content; Token reads Seq 0 for a key never written.
func TestEqualTokenAndMissingKey(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	g := e.guard(t)
	tok, err := g.Token(ctx, "never")
	require.NoError(t, err)
	assert.Equal(t, fence.Token{}, tok)

	five := fence.Token{Name: "cfg", Seq: 5}
	require.NoError(t, g.Put(ctx, five, "cfg", strings.NewReader("v1")))
	require.NoError(t, g.Put(ctx, five, "cfg", strings.NewReader("v2")))
	require.NoError(t, g.Put(ctx, five, "cfg", strings.NewReader("v2")), "the same content under the same token")
	assert.Equal(t, "v2", get(t, e, "cfg"))
}

// A key written under one lock refuses tokens of another: their Seqs are
// not comparable, whichever is larger.
func TestOtherLockRefused(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	g := e.guard(t)
	require.NoError(t, g.Put(ctx, fence.Token{Name: "orders", Seq: 5}, "k", strings.NewReader("orders")))
	for _, seq := range []uint64{1, 5, 1000} {
		err := g.Put(ctx, fence.Token{Name: "billing", Seq: seq}, "k", strings.NewReader("billing"))
		var other *s3fence.OtherLockError
		require.ErrorAs(t, err, &other)
		assert.Equal(t, s3fence.OtherLockError{Key: "k", Stored: "orders", Name: "billing"}, *other)
		assert.ErrorIs(t, err, s3fence.ErrOtherLock)
		assert.NotErrorIs(t, err, fence.ErrStaleToken)
	}
	assert.Equal(t, "orders", get(t, e, "k"))
}

// An object written outside the guard has no token: the first fenced Put
// overwrites it. Token metadata that is not a token is reported, and
// nothing is written over it.
func TestForeignAndCorruptObjects(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	g := e.guard(t)
	put := func(key, body string, meta map[string]string) {
		_, err := e.client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(e.bucket), Key: aws.String(key), Body: strings.NewReader(body), Metadata: meta})
		require.NoError(t, err)
	}
	put("foreign", "written elsewhere", nil)
	tok, err := g.Token(ctx, "foreign")
	require.NoError(t, err)
	assert.Zero(t, tok.Seq)
	require.NoError(t, g.Put(ctx, fence.Token{Name: "x", Seq: 1}, "foreign", strings.NewReader("fenced")))
	assert.Equal(t, "fenced", get(t, e, "foreign"))

	for i, junk := range []string{"banana", "x:0", "x:007", ":5"} {
		key := "corrupt-" + strconv.Itoa(i)
		put(key, "junk", map[string]string{s3fence.MetaToken: junk})
		_, err := g.Token(ctx, key)
		assert.ErrorIs(t, err, s3fence.ErrCorruptToken, "%q", junk)
		err = g.Put(ctx, fence.Token{Name: "x", Seq: 1 << 62}, key, strings.NewReader("fenced"))
		assert.ErrorIs(t, err, s3fence.ErrCorruptToken, "%q", junk)
		assert.NotErrorIs(t, err, fence.ErrStaleToken)
		assert.Equal(t, "junk", get(t, e, key), "left as it was")
	}
}

// A body is written from its current offset: a ReadSeeker's rest, any
// other Reader whole (buffered), nil as empty.
func TestBodies(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	g := e.guard(t)
	tok := fence.Token{Name: "b", Seq: 1}

	rs := strings.NewReader("skip:the rest")
	_, err := rs.Seek(5, io.SeekStart)
	require.NoError(t, err)
	require.NoError(t, g.Put(ctx, tok, "seeker", rs))
	assert.Equal(t, "the rest", get(t, e, "seeker"))

	big := bytes.Repeat([]byte("0123456789"), 300_000) // 3 MB, not a Seeker
	require.NoError(t, g.Put(ctx, tok, "reader", io.MultiReader(bytes.NewReader(big[:1000]), bytes.NewReader(big[1000:]))))
	assert.Equal(t, string(big), get(t, e, "reader"))

	require.NoError(t, g.Put(ctx, tok, "nil", nil))
	assert.Equal(t, "", get(t, e, "nil"))
}

func TestRejectionsAreCounted(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(ctx) })
	g := e.guard(t, s3fence.WithTelemetry(telemetry.Providers{MeterProvider: mp}))
	require.NoError(t, g.Put(ctx, fence.Token{Name: "n", Seq: 7}, "k", strings.NewReader("7")))
	require.ErrorIs(t, g.Put(ctx, fence.Token{Name: "n", Seq: 5}, "k", strings.NewReader("5")), fence.ErrStaleToken)
	got, ok := oteltest.Point(t, r, "dlock.fence.rejected", attribute.String("dlock.guard", "s3"))
	require.True(t, ok, "dlock.fence.rejected{dlock.guard=s3} recorded")
	assert.Equal(t, float64(1), got)
}

// list returns the keys in e's bucket.
func list(t *testing.T, e env) []string {
	t.Helper()
	out, err := e.client.ListObjectsV2(testCtx(t), &s3.ListObjectsV2Input{Bucket: aws.String(e.bucket)})
	require.NoError(t, err)
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys
}

// Put's cost against a plain PutObject of the same body, uncontended, on a
// local versitygw: go test -run '^$' -bench . ./contrib/s3fence/
func BenchmarkPut(b *testing.B) {
	srv := s3test.Start(b)
	client, bucket := srv.Client(b), srv.NewBucket(b)
	g, err := s3fence.New(b.Context(), client, bucket)
	require.NoError(b, err)
	body := bytes.Repeat([]byte("x"), 1024)
	var seq uint64 // across runs (-count)
	b.Run("fenced", func(b *testing.B) {
		for b.Loop() {
			seq++
			// Content unique per write, as the package doc asks.
			binary.BigEndian.PutUint64(body, seq)
			if err := g.Put(b.Context(), fence.Token{Name: "bench", Seq: seq}, "fenced", bytes.NewReader(body)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			seq++
			binary.BigEndian.PutUint64(body, seq)
			if _, err := client.PutObject(b.Context(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("plain"), Body: bytes.NewReader(body)}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
