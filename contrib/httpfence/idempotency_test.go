package httpfence_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/contrib/httpfence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/intent"
	"github.com/dlock-go/dlock/lock/locktest"
)

// seen is what a keyServer's handler found in one request.
type seen struct {
	Keys   []string // the Idempotency-Key header's values
	Tokens []string // the fencing-token header's values
}

// keyServer is a real HTTP server that records the Idempotency-Key and
// fencing-token headers of each request reaching its handler, behind mw
// when mw is not nil; client sends through a Transport.
type keyServer struct {
	srv    *httptest.Server
	client *http.Client

	mu   sync.Mutex
	seen []seen
}

func newKeyServer(t *testing.T, mw func(http.Handler) http.Handler) *keyServer {
	t.Helper()
	s := &keyServer{}
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.seen = append(s.seen, seen{
			Keys:   r.Header.Values(httpfence.HeaderIdempotencyKey),
			Tokens: r.Header.Values(httpfence.Header),
		})
	})
	if mw != nil {
		h = mw(h)
	}
	s.srv = httptest.NewServer(h)
	t.Cleanup(s.srv.Close)
	s.client = &http.Client{Transport: &httpfence.Transport{Base: s.srv.Client().Transport}}
	return s
}

// do sends a POST with ctx and the given header values (name, value
// pairs), returning the status code.
func (s *keyServer) do(t *testing.T, ctx context.Context, header ...string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.srv.URL, strings.NewReader("payload"))
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := s.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	return resp.StatusCode
}

func (s *keyServer) requests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.seen...)
}

func TestTransportSendsIdempotencyKey(t *testing.T) {
	s := newKeyServer(t, httpfence.Middleware(fence.NewMemoryGuard()))
	key := intent.Key("orders/42", "charge/order-42", 7)
	ctx := intent.NewContext(fence.NewContext(testCtx(t), fence.Token{Name: "orders/42", Seq: 7}), key)

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.srv.URL, strings.NewReader("payload"))
	require.NoError(t, err)
	resp, err := s.client.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, []seen{{Keys: []string{`"` + key + `"`}, Tokens: []string{"orders/42:7"}}}, s.requests())
	assert.Empty(t, req.Header.Values(httpfence.HeaderIdempotencyKey), "the caller's request is unchanged")
}

func TestTransportSendsNoKeyWithoutOne(t *testing.T) {
	s := newKeyServer(t, nil)
	ctx := testCtx(t)
	tok := fence.NewContext(ctx, fence.Token{Name: "orders/42", Seq: 7})

	assert.Equal(t, http.StatusOK, s.do(t, tok))                        // a token, no key
	assert.Equal(t, http.StatusOK, s.do(t, ctx))                        // neither
	assert.Equal(t, http.StatusOK, s.do(t, intent.NewContext(tok, ""))) // an empty key is no key
	assert.Equal(t, []seen{{Tokens: []string{"orders/42:7"}}, {}, {Tokens: []string{"orders/42:7"}}}, s.requests())
}

// A resource that checks no token still gets the key: that is what the
// intent journal relies on. A fenced resource (Middleware) answers such a
// request 428, as any request without a token.
func TestTransportSendsKeyWithoutToken(t *testing.T) {
	key := intent.Key("orders/42", "charge/order-42", 7)
	ctx := intent.NewContext(testCtx(t), key)

	plain := newKeyServer(t, nil)
	assert.Equal(t, http.StatusOK, plain.do(t, ctx))
	assert.Equal(t, []seen{{Keys: []string{`"` + key + `"`}}}, plain.requests())

	fenced := newKeyServer(t, httpfence.Middleware(fence.NewMemoryGuard()))
	assert.Equal(t, http.StatusPreconditionRequired, fenced.do(t, ctx))
	assert.Empty(t, fenced.requests())
}

func TestTransportKeepsCallersIdempotencyKey(t *testing.T) {
	s := newKeyServer(t, nil)
	ctx := intent.NewContext(testCtx(t), "from-the-context")

	assert.Equal(t, http.StatusOK, s.do(t, ctx, httpfence.HeaderIdempotencyKey, `"the-callers"`))
	assert.Equal(t, http.StatusOK, s.do(t, ctx, "idempotency-key", "unquoted")) // any spelling of the name
	assert.Equal(t, []seen{{Keys: []string{`"the-callers"`}}, {Keys: []string{"unquoted"}}}, s.requests())
}

// The key on the wire, read as bytes from the connection: one header line,
// the key as an RFC 8941 sf-string (quoted, '"' and '\' escaped).
func TestIdempotencyKeyWireForm(t *testing.T) {
	w := newWireServer(t)
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	client := &http.Client{Transport: &httpfence.Transport{Base: base}}

	key := intent.Key("orders/42", "charge/order-42", 7)
	for _, c := range []struct{ key, want string }{
		{key, `Idempotency-Key: "` + key + `"`},
		{"8e03978e-40d5-43e8-bc93-6894a57f9324", `Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`},
		{`a "quoted" \ key`, `Idempotency-Key: "a \"quoted\" \\ key"`},
		{"~!#$%&'()*+,-./:;<=>?@[]^_`{|}", "Idempotency-Key: \"~!#$%&'()*+,-./:;<=>?@[]^_`{|}\""},
	} {
		req, err := http.NewRequestWithContext(intent.NewContext(testCtx(t), c.key), http.MethodGet, w.url, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())

		var lines []string
		for line := range strings.SplitSeq(w.next(t), "\r\n") {
			if strings.HasPrefix(strings.ToLower(line), "idempotency-key:") {
				lines = append(lines, line)
			}
		}
		assert.Equal(t, []string{c.want}, lines, "%q", c.key)
	}
}

func TestTransportRejectsInvalidKeyWithoutSending(t *testing.T) {
	var hits atomic.Int64
	counted := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(counted.Close)
	client := &http.Client{Transport: &httpfence.Transport{Base: counted.Client().Transport}}

	for _, key := range []string{"line\nbreak", "tab\there", "caf\u00e9", "nul\x00", "del\x7f"} {
		body := &closeRecorder{Reader: strings.NewReader("payload")}
		req, err := http.NewRequestWithContext(intent.NewContext(testCtx(t), key), http.MethodPost, counted.URL, body)
		require.NoError(t, err)
		resp, err := client.Do(req)
		if resp != nil {
			resp.Body.Close()
		}
		assert.ErrorIs(t, err, httpfence.ErrInvalidKey, "%q", key)
		assert.True(t, body.closed.Load(), "RoundTrip closes the body on error")
	}
	assert.Zero(t, hits.Load(), "nothing was sent")
}

func TestSetIdempotencyKey(t *testing.T) {
	h := http.Header{}
	require.NoError(t, httpfence.SetIdempotencyKey(h, `k"1`))
	assert.Equal(t, []string{`"k\"1"`}, h.Values("idempotency-key"))
	require.NoError(t, httpfence.SetIdempotencyKey(h, "k2"))
	assert.Equal(t, []string{`"k2"`}, h.Values(httpfence.HeaderIdempotencyKey), "set, not added")

	assert.ErrorIs(t, httpfence.SetIdempotencyKey(h, ""), httpfence.ErrInvalidKey)
	assert.ErrorIs(t, httpfence.SetIdempotencyKey(h, "k\r\n3"), httpfence.ErrInvalidKey)
	assert.Equal(t, []string{`"k2"`}, h.Values(httpfence.HeaderIdempotencyKey), "left alone on error")
}

// Journal.Do's fn gets a ctx with its key: through the Transport, every
// attempt of one operation sends that key, and the resource sees the same
// header each time.
func TestJournalDoSendsItsKey(t *testing.T) {
	ctx := testCtx(t)
	var calls atomic.Int64
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Values(httpfence.HeaderIdempotencyKey)...)
		mu.Unlock()
		if calls.Add(1) == 1 {
			http.Error(w, "timed out upstream", http.StatusGatewayTimeout) // the first attempt's outcome is unknown
		}
	}))
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &httpfence.Transport{Base: srv.Client().Transport}}

	held, err := locktest.NewMemory().Locker("orders/42").Lock(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, held.Unlock(context.Background())) })
	j := intent.New(intent.NewMemory())

	var keys []string
	charge := func(ctx context.Context, key string) error {
		keys = append(keys, key)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"amount":4200}`))
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
	assert.Error(t, j.Do(ctx, held, "charge/order-42", charge), "the first attempt leaves the intent open")
	require.NoError(t, j.Do(ctx, held, "charge/order-42", charge), "the retry")
	require.NoError(t, j.Do(ctx, held, "charge/order-42", charge), "recorded: fn is not called")

	require.Len(t, keys, 2)
	assert.Equal(t, keys[0], keys[1], "one key for every attempt")
	assert.Equal(t, intent.Key("orders/42", "charge/order-42", held.Token().Seq), keys[0])
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{`"` + keys[0] + `"`, `"` + keys[0] + `"`}, got)
}

// wireServer is a real TCP server that answers every HTTP/1.1 request 204
// and hands its header bytes, as read from the connection, to next.
type wireServer struct {
	url  string
	reqs chan string
}

func newWireServer(t *testing.T) *wireServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	w := &wireServer{url: "http://" + lis.Addr().String(), reqs: make(chan string, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return // closed by the cleanup
			}
			w.serve(c)
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		<-done
	})
	return w
}

func (w *wireServer) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	br := bufio.NewReader(c)
	var head strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		head.WriteString(line)
		if line == "\r\n" {
			break
		}
	}
	_, _ = io.WriteString(c, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
	w.reqs <- head.String()
}

// next returns the header bytes of the next request the server read.
func (w *wireServer) next(t *testing.T) string {
	t.Helper()
	select {
	case h := <-w.reqs:
		return h
	case <-time.After(time.Minute):
		t.Fatal("no request reached the wire server")
		return ""
	}
}
