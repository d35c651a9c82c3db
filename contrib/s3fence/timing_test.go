package s3fence_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/contrib/s3fence"
	"github.com/dlock-go/dlock/contrib/s3fence/s3test"
	"github.com/dlock-go/dlock/fence"
)

// putOf returns the token in a PUT request's metadata, or "" for any other
// request.
func putOf(r *http.Request) string {
	if r.Method != http.MethodPut {
		return ""
	}
	return r.Header.Get("X-Amz-Meta-" + s3fence.MetaToken)
}

// A write whose content the object already holds under a lower token
// would leave the ETag as it is, and a writer that read the object before
// it would pass its If-Match after it. Here writer A (token 6) reads the
// object (content X under token 5); before A's PUT reaches the store, B
// (token 7) writes X again. If B's write landed, A's If-Match would still
// match and token 6 would land after token 7. Put refuses B's write
// instead, and A's lands.
func TestSameContentUnderAnotherTokenRefused(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	direct := e.guard(t)
	const key, name = "same", "same"
	require.NoError(t, direct.Put(ctx, fence.Token{Name: name, Seq: 5}, key, strings.NewReader("X")))

	var errB error
	var held atomic.Int32
	proxy := s3test.StartProxy(t, e.srv, s3test.ProxyConfig{Wrap: func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if putOf(r) == name+":6" && held.Add(1) == 1 {
				errB = direct.Put(r.Context(), fence.Token{Name: name, Seq: 7}, key, strings.NewReader("X"))
			}
			return next.RoundTrip(r)
		})
	}})
	a, err := s3fence.New(ctx, proxy.Client(t), e.bucket)
	require.NoError(t, err)
	errA := a.Put(ctx, fence.Token{Name: name, Seq: 6}, key, strings.NewReader("A"))

	require.Equal(t, int32(1), held.Load(), "A's PUT was held once")
	if errB == nil && errA == nil {
		t.Fatalf("token 6 landed after token 7 had landed (B wrote the content A had read, so the ETag did not change)")
	}
	require.ErrorIs(t, errB, s3fence.ErrSameContent)
	assert.ErrorContains(t, errB, "token same:5")
	require.NoError(t, errA)
	tok, err := direct.Token(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, uint64(6), tok.Seq)
	assert.Equal(t, "A", get(t, e, key))
}

// A PUT that lands but whose answer is lost: the proxy forwards it and
// then withholds the response until the client gives up (the attempt
// timeout). Put reads the object, finds its write ID there, and returns
// nil without writing again.
func TestLostAnswerResolvedByWriteID(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	var puts, forwarded atomic.Int32
	proxy := s3test.StartProxy(t, e.srv, s3test.ProxyConfig{Wrap: func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if putOf(r) != "lost:3" {
				return next.RoundTrip(r)
			}
			n := puts.Add(1)
			resp, err := next.RoundTrip(r)
			forwarded.Add(1)
			if err != nil || n > 1 {
				return resp, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			<-r.Context().Done() // the client gave up
			return nil, r.Context().Err()
		})
	}})
	g, err := s3fence.New(ctx, proxy.Client(t, noRetries), e.bucket, s3fence.WithAttemptTimeout(500*time.Millisecond))
	require.NoError(t, err)

	require.NoError(t, g.Put(ctx, fence.Token{Name: "lost", Seq: 3}, "k", strings.NewReader("three")))
	assert.Equal(t, int32(1), puts.Load(), "one PUT: the write ID showed that it had landed")
	assert.Equal(t, "three", get(t, e, "k"))
}

// A PUT lost before it reached the store: the proxy drops it. Put reads
// the object, does not find its write ID, and writes again.
func TestLostRequestRetried(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	var puts atomic.Int32
	proxy := s3test.StartProxy(t, e.srv, s3test.ProxyConfig{Wrap: func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if putOf(r) == "lost:3" && puts.Add(1) == 1 {
				// Read the body first: the server notices that the client
				// left only once the request is read.
				_, _ = io.Copy(io.Discard, r.Body)
				<-r.Context().Done()
				return nil, r.Context().Err()
			}
			return next.RoundTrip(r)
		})
	}})
	g, err := s3fence.New(ctx, proxy.Client(t, noRetries), e.bucket, s3fence.WithAttemptTimeout(500*time.Millisecond))
	require.NoError(t, err)

	require.NoError(t, g.Put(ctx, fence.Token{Name: "lost", Seq: 3}, "k", strings.NewReader("three")))
	assert.Equal(t, int32(2), puts.Load(), "the lost PUT and its retry")
	assert.Equal(t, "three", get(t, e, "k"))
}

// When ctx ends while a PUT is unanswered, Put says the outcome is
// unknown, with the write ID; Landed tells.
func TestOutcomeUnknownWhenCtxEnds(t *testing.T) {
	e := newEnv(t)
	release := make(chan struct{})
	proxy := s3test.StartProxy(t, e.srv, s3test.ProxyConfig{Wrap: func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if putOf(r) != "slow:3" {
				return next.RoundTrip(r)
			}
			resp, err := next.RoundTrip(r) // lands
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return nil, errors.New("answer lost")
		})
	}})
	t.Cleanup(func() { close(release) })
	g, err := s3fence.New(testCtx(t), proxy.Client(t, noRetries), e.bucket)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(testCtx(t), time.Second)
	defer cancel()
	err = g.Put(ctx, fence.Token{Name: "slow", Seq: 3}, "k", strings.NewReader("three"))
	require.ErrorIs(t, err, s3fence.ErrOutcomeUnknown)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var unknown *s3fence.OutcomeUnknownError
	require.ErrorAs(t, err, &unknown)
	assert.Equal(t, "k", unknown.Key)
	require.NotEmpty(t, unknown.WriteID)

	landed, err := g.Landed(testCtx(t), "k", unknown.WriteID)
	require.NoError(t, err)
	assert.True(t, landed, "the PUT reached the store")
	landed, err = g.Landed(testCtx(t), "k", "some-other-write")
	require.NoError(t, err)
	assert.False(t, landed)
}

// A 409 ConditionalRequestConflict (S3's answer while another conditional
// write of the key is in progress; versitygw serializes them instead) is
// retried after a pause. The proxy answers the first PUT with one, as S3
// would, without forwarding it.
func TestConflictRetried(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	var puts atomic.Int32
	proxy := s3test.StartProxy(t, e.srv, s3test.ProxyConfig{Wrap: func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if putOf(r) == "c:1" && puts.Add(1) == 1 {
				return s3test.ErrorResponse(r, http.StatusConflict, "ConditionalRequestConflict",
					"A conflicting conditional operation is currently in progress against this resource. Please try again."), nil
			}
			return next.RoundTrip(r)
		})
	}})
	g, err := s3fence.New(ctx, proxy.Client(t), e.bucket)
	require.NoError(t, err)
	require.NoError(t, g.Put(ctx, fence.Token{Name: "c", Seq: 1}, "k", strings.NewReader("one")))
	assert.Equal(t, int32(2), puts.Load())
	assert.Equal(t, "one", get(t, e, "k"))

	// A store that keeps answering 409: Put gives up after its attempts.
	puts.Store(-100)
	always := s3test.StartProxy(t, e.srv, s3test.ProxyConfig{Wrap: func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if putOf(r) == "c:2" {
				return s3test.ErrorResponse(r, http.StatusConflict, "ConditionalRequestConflict", "again"), nil
			}
			return next.RoundTrip(r)
		})
	}})
	g, err = s3fence.New(ctx, always.Client(t), e.bucket, s3fence.WithMaxAttempts(3))
	require.NoError(t, err)
	err = g.Put(ctx, fence.Token{Name: "c", Seq: 2}, "k", strings.NewReader("two"))
	assert.ErrorIs(t, err, s3fence.ErrContended)
	assert.ErrorContains(t, err, "3 attempts")
	assert.Equal(t, "one", get(t, e, "k"))
}
