package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/contrib/httpfence"
	"github.com/dlock-go/dlock/integration/cluster/history"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// api is a payments server on loopback, its audit, and a clock the test
// moves.
type api struct {
	t     *testing.T
	s     *server
	url   string
	audit string
	cli   *http.Client

	mu  sync.Mutex
	now time.Time
}

func newAPI(t *testing.T, window time.Duration) *api {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := history.Create(path)
	require.NoError(t, err)
	a := &api{t: t, audit: path, cli: &http.Client{Timeout: 10 * time.Second}, now: time.Unix(1_800_000_000, 0)}
	a.s = newServer(w, window, 0)
	a.s.now = a.clock
	srv := httptest.NewServer(a.s)
	a.url = srv.URL
	t.Cleanup(func() {
		a.cli.CloseIdleConnections()
		srv.Close()
		assert.NoError(t, w.Close())
	})
	return a
}

func (a *api) clock() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.now
}

func (a *api) advance(d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.now = a.now.Add(d)
}

// answer is a reply: status, body, whether it was replayed.
type answer struct {
	code     int
	body     string
	replayed bool
}

// charge posts a charge of order with amount, with the header values
// given (header, value, ...), and returns the reply.
func (a *api) charge(ctx context.Context, order, amount int64, headers ...string) (answer, error) {
	b, err := json.Marshal(payload{Order: order, Amount: amount})
	require.NoError(a.t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url+"/charge", bytes.NewReader(b))
	require.NoError(a.t, err)
	for i := 0; i < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := a.cli.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(body), resp.Header.Get(headerReplayed) == "true"}, err
}

func (a *api) mustCharge(order, amount int64, headers ...string) answer {
	a.t.Helper()
	r, err := a.charge(a.t.Context(), order, amount, headers...)
	require.NoError(a.t, err)
	return r
}

func (a *api) charges() []history.Charge {
	a.t.Helper()
	cs, err := history.ReadLines[history.Charge](a.audit)
	require.NoError(a.t, err)
	return cs
}

// TestCharge: the draft's scenarios, one by one.
func TestCharge(t *testing.T) {
	a := newAPI(t, time.Hour)

	// No key: a charge every time.
	first := a.mustCharge(1, 100)
	second := a.mustCharge(1, 100)
	assert.Equal(t, http.StatusCreated, first.code)
	assert.Equal(t, http.StatusCreated, second.code)
	assert.NotEqual(t, first.body, second.body, "two charges, two IDs")
	assert.Len(t, a.charges(), 2, "without a key, each request is an effect")

	// A key: the first request charges, a retry with the same payload
	// gets the same reply and charges nothing.
	k := `"charge-order-2.7.abc"`
	r1 := a.mustCharge(2, 200, headerKey, k, headerToken, "dlock-payments:7")
	r2 := a.mustCharge(2, 200, headerKey, k)
	assert.Equal(t, http.StatusCreated, r1.code)
	assert.False(t, r1.replayed)
	assert.Equal(t, answer{r1.code, r1.body, true}, r2, "the stored reply, replayed")
	cs := a.charges()
	require.Len(t, cs, 3)
	assert.Equal(t, history.Charge{T: cs[2].T, ID: "ch_3", Order: 2, Amount: 200, Key: "charge-order-2.7.abc", Token: "dlock-payments:7"}, cs[2],
		"the audit has the key unquoted and the token as sent")

	// The same key with another payload: 422, nothing charged.
	assert.Equal(t, http.StatusUnprocessableEntity, a.mustCharge(2, 201, headerKey, k).code)
	assert.Equal(t, http.StatusUnprocessableEntity, a.mustCharge(3, 200, headerKey, k).code)
	assert.Len(t, a.charges(), 3)

	// Malformed: 400, nothing charged.
	for _, h := range [][]string{
		{headerKey, "charge-order-2"},        // not an sf-string
		{headerKey, `""`},                    // empty
		{headerKey, `"a"`, headerKey, `"b"`}, // two fields
		{headerKey, `"a" b`},                 // trailing bytes
		{headerKey, "\"a\\b\""},              // a bad escape
		{headerKey, "\"a\tb\""},              // not printable
		{headerKey, `"never closed`},         // unterminated
	} {
		assert.Equal(t, http.StatusBadRequest, a.mustCharge(4, 100, h...).code, "%q", h)
	}
	for _, body := range []string{`{"order":0,"amount":1}`, `{"order":1}`, `{"order":1,"amount":1,"currency":"eur"}`, `[`} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, a.url+"/charge", bytes.NewReader([]byte(body)))
		require.NoError(t, err)
		resp, err := a.cli.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
	}
	assert.Len(t, a.charges(), 3)
}

// TestInFlight: a retry while the first request with its key is being
// processed gets 409; the first request's client going away does not stop
// its charge; a retry after it gets the stored reply.
func TestInFlight(t *testing.T) {
	a := newAPI(t, time.Hour)
	entered := make(chan struct{})
	proceed := make(chan struct{})
	var once sync.Once
	a.s.process = func() {
		once.Do(func() {
			close(entered)
			<-proceed
		})
	}
	k := `"charge-order-5.9.xyz"`
	ctx, cancel := context.WithCancel(t.Context())
	gone := make(chan error, 1)
	go func() {
		_, err := a.charge(ctx, 5, 500, headerKey, k)
		gone <- err
	}()
	<-entered
	assert.Equal(t, http.StatusConflict, a.mustCharge(5, 500, headerKey, k).code, "the first is under way")
	assert.Equal(t, http.StatusUnprocessableEntity, a.mustCharge(5, 501, headerKey, k).code, "another payload: 422 even now")
	cancel() // the client goes away (a worker killed during its call)
	assert.ErrorIs(t, <-gone, context.Canceled)
	close(proceed)

	// The charge is made without its client; the retry is its reply.
	require.Eventually(t, func() bool { return len(a.charges()) == 1 }, 5*time.Second, 5*time.Millisecond)
	var r answer
	require.Eventually(t, func() bool {
		r = a.mustCharge(5, 500, headerKey, k)
		return r.code != http.StatusConflict
	}, 5*time.Second, 5*time.Millisecond, "the reply is stored once the charge is made")
	assert.Equal(t, http.StatusCreated, r.code)
	assert.True(t, r.replayed)
	assert.Len(t, a.charges(), 1, "one effect for the key")
}

// TestWindow: once the window has passed since a key's reply was stored,
// the key is as if never seen: a retry charges again.
func TestWindow(t *testing.T) {
	a := newAPI(t, time.Second)
	k := `"charge-order-6.3.w"`
	assert.Equal(t, http.StatusCreated, a.mustCharge(6, 600, headerKey, k).code)
	a.advance(999 * time.Millisecond)
	assert.True(t, a.mustCharge(6, 600, headerKey, k).replayed, "within the window")
	a.advance(time.Millisecond)
	r := a.mustCharge(6, 600, headerKey, k)
	assert.Equal(t, http.StatusCreated, r.code)
	assert.False(t, r.replayed, "past the window: a new charge")
	assert.Len(t, a.charges(), 2)
	a.advance(time.Millisecond)
	assert.Equal(t, http.StatusUnprocessableEntity, a.mustCharge(6, 601, headerKey, k).code, "the key is claimed again, for its payload")
}

// TestFailedAudit: a charge whose audit cannot be written is not made: 500,
// the key released, and the server told to stop.
func TestFailedAudit(t *testing.T) {
	a := newAPI(t, time.Hour)
	bad, err := history.Create(filepath.Join(t.TempDir(), "closed.jsonl"))
	require.NoError(t, err)
	require.NoError(t, bad.Close())
	good := a.s.audit
	a.s.audit = bad
	defer func() { a.s.audit = good }()
	k := `"k"`
	assert.Equal(t, http.StatusInternalServerError, a.mustCharge(7, 700, headerKey, k).code)
	select {
	case err := <-a.s.failed:
		assert.Error(t, err)
	default:
		t.Error("the failure was not reported")
	}
	assert.Equal(t, http.StatusInternalServerError, a.mustCharge(7, 700, headerKey, k).code, "the key was released: not 409")
}

// TestKeyFromHTTPFence: a key sent by contrib/httpfence (quoted and
// escaped as an sf-string) is read back as it was.
func TestKeyFromHTTPFence(t *testing.T) {
	for _, key := range []string{"charge-order-42.7.AbC_-~", `with "quotes" and \ backslash`, "spaces inside"} {
		h := http.Header{}
		require.NoError(t, httpfence.SetIdempotencyKey(h, key))
		got, ok, err := idempotencyKey(h)
		require.NoError(t, err, "%q", h.Get(headerKey))
		assert.True(t, ok)
		assert.Equal(t, key, got)
	}
}

func TestParseSFString(t *testing.T) {
	for in, want := range map[string]string{
		`"abc"`:          "abc",
		`  "a b"  `:      "a b",
		`"a\"b\\c"`:      `a"b\c`,
		`"k";expires=10`: "k",
	} {
		got, err := parseSFString(in)
		if assert.NoError(t, err, in) {
			assert.Equal(t, want, got, in)
		}
	}
	for _, in := range []string{``, `abc`, `"abc`, `"a"x`, `"a\b"`, "\"\x7f\"", `"a\`} {
		_, err := parseSFString(in)
		assert.Error(t, err, "%q", in)
	}
	_, _, err := idempotencyKey(http.Header{headerKey: {`""`}})
	assert.True(t, err != nil && !errors.Is(err, context.Canceled), "an empty key is refused: %v", err)
}
