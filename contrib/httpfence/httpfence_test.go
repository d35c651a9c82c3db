package httpfence_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/contrib/httpfence"
	"github.com/dlock-go/dlock/fence"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// fixture is a real HTTP server whose handler is behind the middleware and
// records the token it was given.
type fixture struct {
	srv    *httptest.Server
	client *http.Client // with a Transport
	calls  atomic.Int64
	last   atomic.Value // fence.Token the handler found in its context
}

func newFixture(t *testing.T, g fence.Guard) *fixture {
	t.Helper()
	f := &fixture{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		tok, ok := fence.FromContext(r.Context())
		if !ok {
			http.Error(w, "no token in context", http.StatusInternalServerError)
			return
		}
		f.last.Store(tok)
		io.WriteString(w, "ok "+tok.String())
	})
	f.srv = httptest.NewServer(httpfence.Middleware(g)(handler))
	t.Cleanup(f.srv.Close)
	f.client = &http.Client{Transport: &httpfence.Transport{Base: f.srv.Client().Transport}}
	return f
}

// do sends a request with the client's Transport and tok in the context
// (none if tok is nil).
func (f *fixture) do(t *testing.T, tok *fence.Token) (int, string) {
	t.Helper()
	ctx := testCtx(t)
	if tok != nil {
		ctx = fence.NewContext(ctx, *tok)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL, strings.NewReader("payload"))
	require.NoError(t, err)
	resp, err := f.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// raw sends a request with the given header values and no Transport.
func (f *fixture) raw(t *testing.T, values ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodGet, f.srv.URL, nil)
	require.NoError(t, err)
	for _, v := range values {
		req.Header.Add(httpfence.Header, v)
	}
	resp, err := f.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func TestAdmittedTokenReachesHandler(t *testing.T) {
	f := newFixture(t, fence.NewMemoryGuard())
	tok := fence.Token{Name: "orders/eu west", Seq: 42}
	code, body := f.do(t, &tok)
	assert.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, "ok orders/eu%20west:42", body)
	assert.Equal(t, tok, f.last.Load())
}

// The seed's timeline over HTTP: A (N) is admitted, B (N+1) is admitted, A's
// late request with N gets 409 naming both numbers and never reaches the
// handler.
func TestStaleTokenGets409WithBothNumbers(t *testing.T) {
	g := fence.NewMemoryGuard()
	f := newFixture(t, g)
	a := fence.Token{Name: "accounts/7", Seq: 41}
	b := fence.Token{Name: "accounts/7", Seq: 42}

	code, _ := f.do(t, &a)
	require.Equal(t, http.StatusOK, code)
	code, _ = f.do(t, &b)
	require.Equal(t, http.StatusOK, code)

	code, body := f.do(t, &a)
	assert.Equal(t, http.StatusConflict, code)
	assert.Contains(t, body, "stale token")
	assert.Contains(t, body, "seq 41")
	assert.Contains(t, body, "seq 42")
	assert.Contains(t, body, `"accounts/7"`)
	assert.Equal(t, int64(2), f.calls.Load(), "the stale request never reached the handler")
	assert.Equal(t, b, f.last.Load())
	assert.Equal(t, uint64(42), g.Highest("accounts/7"))
}

func TestMalformedHeaderGets400(t *testing.T) {
	f := newFixture(t, fence.NewMemoryGuard())
	for _, c := range []struct {
		values []string
		want   string
	}{
		{[]string{"orders"}, "invalid token"},
		{[]string{"orders:"}, "invalid token"},
		{[]string{"orders:-1"}, "invalid token"},
		{[]string{"orders:007"}, "invalid token"},
		{[]string{"orders:18446744073709551616"}, "invalid token"},
		{[]string{"ord ers:1"}, "invalid token"},
		{[]string{"orders:0"}, "no token (seq 0)"},
		{[]string{":5"}, "empty name"},
		{[]string{""}, "invalid token"},
		{[]string{"a:1", "a:2"}, "2 Dlock-Fence-Token headers"},
	} {
		code, body := f.raw(t, c.values...)
		assert.Equal(t, http.StatusBadRequest, code, "%q", c.values)
		assert.Contains(t, body, c.want, "%q", c.values)
		assert.Contains(t, body, httpfence.Header, "%q", c.values)
	}
	assert.Zero(t, f.calls.Load())
}

func TestMissingHeaderGets428(t *testing.T) {
	f := newFixture(t, fence.NewMemoryGuard())
	code, body := f.raw(t)
	assert.Equal(t, http.StatusPreconditionRequired, code)
	assert.Contains(t, body, "missing Dlock-Fence-Token header")

	// Through the Transport, a context without a token sends no header.
	code, _ = f.do(t, nil)
	assert.Equal(t, http.StatusPreconditionRequired, code)
	assert.Zero(t, f.calls.Load())
}

func TestGuardFailureGets503WithoutDetails(t *testing.T) {
	// A guard whose backend is unreachable, failing as redisfence does
	// when nothing listens on its address.
	g := failingGuard{errors.New("redisfence: admit: dial tcp 127.0.0.1:1: connect: connection refused")}
	f := newFixture(t, g)

	tok := fence.Token{Name: "orders", Seq: 1}
	code, body := f.do(t, &tok)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "orders:1 could not be checked")
	assert.NotContains(t, body, "127.0.0.1:1", "backend details are not sent to clients")
	assert.Zero(t, f.calls.Load())
}

func TestTransportRejectsInvalidTokenWithoutSending(t *testing.T) {
	f := newFixture(t, fence.NewMemoryGuard())
	var hits atomic.Int64
	counted := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(counted.Close)

	for _, c := range []struct {
		tok  fence.Token
		want error
	}{
		{fence.Token{Name: "orders", Seq: 0}, fence.ErrNoToken},
		{fence.Token{Name: "", Seq: 3}, fence.ErrInvalidToken},
	} {
		body := &closeRecorder{Reader: strings.NewReader("payload")}
		req, err := http.NewRequestWithContext(fence.NewContext(testCtx(t), c.tok), http.MethodPost, counted.URL, body)
		require.NoError(t, err)
		resp, err := f.client.Do(req)
		if resp != nil {
			resp.Body.Close()
		}
		assert.ErrorIs(t, err, c.want)
		assert.True(t, body.closed.Load(), "RoundTrip closes the body on error")
	}
	assert.Zero(t, hits.Load(), "nothing was sent")
}

func TestTransportDoesNotModifyRequestAndDefaultsBase(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get(httpfence.Header))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(http.DefaultTransport.(*http.Transport).CloseIdleConnections)

	client := &http.Client{Transport: &httpfence.Transport{}} // Base nil: http.DefaultTransport
	req, err := http.NewRequestWithContext(fence.NewContext(testCtx(t), fence.Token{Name: "jobs/nightly", Seq: 9}), http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set(httpfence.Header, "stale:1") // replaced by the context's token
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()

	assert.Equal(t, "jobs/nightly:9", got.Load())
	assert.Equal(t, "stale:1", req.Header.Get(httpfence.Header), "the caller's request is unchanged")
}

func TestHeaderHelpers(t *testing.T) {
	h := http.Header{}
	require.NoError(t, httpfence.SetHeader(h, fence.Token{Name: "a:b", Seq: 7}))
	assert.Equal(t, "a%3Ab:7", h.Get("dlock-fence-token"))
	tok, err := httpfence.FromHeader(h)
	require.NoError(t, err)
	assert.Equal(t, fence.Token{Name: "a:b", Seq: 7}, tok)

	assert.ErrorIs(t, httpfence.SetHeader(h, fence.Token{Name: "a"}), fence.ErrNoToken)
	assert.Equal(t, "a%3Ab:7", h.Get(httpfence.Header), "left alone on error")
	_, err = httpfence.FromHeader(http.Header{})
	assert.ErrorIs(t, err, httpfence.ErrMissingToken)
}

type closeRecorder struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeRecorder) Close() error { c.closed.Store(true); return nil }

// failingGuard is a guard whose every check fails with err, as one whose
// backend cannot be reached.
type failingGuard struct{ err error }

func (g failingGuard) Admit(context.Context, fence.Token) error { return g.err }
