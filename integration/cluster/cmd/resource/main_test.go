package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/contrib/httpfence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/cluster/history"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server is a resource served on loopback, and its log.
type server struct {
	t   *testing.T
	url string
	log string
	cli *http.Client
}

func newServer(t *testing.T, caps map[string]int, admitLower bool) *server {
	t.Helper()
	path := filepath.Join(t.TempDir(), "resource.jsonl")
	lw, err := history.Create(path)
	require.NoError(t, err)
	srv := httptest.NewServer(newResource(lw, caps, admitLower))
	cli := &http.Client{Timeout: 10 * time.Second}
	t.Cleanup(func() {
		cli.CloseIdleConnections()
		srv.Close()
		assert.NoError(t, lw.Close())
	})
	return &server{t: t, url: srv.URL, log: path, cli: cli}
}

// do makes a request with the parameters kv (key, value, ...) and returns
// the status and the trimmed body.
func (s *server) do(method, path string, kv ...string) (int, string) {
	s.t.Helper()
	q := url.Values{}
	for i := 0; i < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	req, err := http.NewRequestWithContext(s.t.Context(), method, s.url+path+"?"+q.Encode(), nil)
	require.NoError(s.t, err)
	resp, err := s.cli.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// records reads the log (the writer flushes every line).
func (s *server) records() []history.Record {
	s.t.Helper()
	recs, err := history.ReadLines[history.Record](s.log)
	require.NoError(s.t, err)
	return recs
}

// reply is a status and a body.
type reply struct {
	code int
	body string
}

func (s *server) read(lock, tok string) reply {
	s.t.Helper()
	c, b := s.do(http.MethodGet, "/fenced", "lock", lock, "tok", tok)
	if c != http.StatusOK {
		b = ""
	}
	return reply{c, b}
}

func (s *server) write(lock, tok, v string) int {
	s.t.Helper()
	c, _ := s.do(http.MethodPost, "/fenced", "lock", lock, "tok", tok, "v", v)
	return c
}

func TestFencedAdmitsByToken(t *testing.T) {
	s := newServer(t, nil, false)
	assert.Equal(t, reply{200, "0"}, s.read("L", "5"))
	assert.Equal(t, 200, s.write("L", "5", "1"))
	assert.Equal(t, reply{409, ""}, s.read("L", "4"), "a read below the mark")
	assert.Equal(t, 409, s.write("L", "4", "9"), "a write below the mark")
	assert.Equal(t, reply{200, "1"}, s.read("L", "5"), "the mark itself")
	assert.Equal(t, reply{200, "1"}, s.read("L", "7"), "a read above the mark")
	assert.Equal(t, 200, s.write("L", "6", "2"), "the read of 7 did not raise the mark")
	assert.Equal(t, 409, s.write("L", "0", "3"), "Seq 0 is no token")
	assert.Equal(t, 200, s.write("M", "1", "1"), "marks are per lock")
	assert.Equal(t, []history.Record{
		{Kind: history.Write, Lock: "L", Tok: 5, Value: 1},
		{Kind: history.Write, Lock: "L", Tok: 6, Value: 2},
		{Kind: history.Write, Lock: "M", Tok: 1, Value: 1},
	}, withoutT(t, s.records()))
}

func TestAdmitLowerPlant(t *testing.T) {
	s := newServer(t, nil, true)
	assert.Equal(t, 200, s.write("L", "5", "1"))
	assert.Equal(t, reply{200, "1"}, s.read("L", "3"))
	assert.Equal(t, 200, s.write("L", "3", "2"), "the plant admits a lower token")
	assert.Equal(t, 200, s.write("L", "4", "3"), "the mark stayed 5, and is not enforced")
	assert.Equal(t, []history.Record{
		{Kind: history.Write, Lock: "L", Tok: 5, Value: 1},
		{Kind: history.Write, Lock: "L", Tok: 3, Value: 2},
		{Kind: history.Write, Lock: "L", Tok: 4, Value: 3},
	}, withoutT(t, s.records()))
}

func (s *server) enter(lock, who, mode string) reply {
	s.t.Helper()
	c, b := s.do(http.MethodPost, "/unfenced/enter", "lock", lock, "who", who, "mode", mode)
	return reply{c, b}
}

func (s *server) exit(lock, who, v, expect string) reply {
	s.t.Helper()
	c, b := s.do(http.MethodPost, "/unfenced/exit", "lock", lock, "who", who, "v", v, "expect", expect)
	return reply{c, b}
}

func TestUnfencedOverlapAndLostUpdate(t *testing.T) {
	s := newServer(t, nil, false)
	// In turn: no record.
	assert.Equal(t, reply{200, "0"}, s.enter("L", "w1/g1", "x"))
	assert.Equal(t, reply{200, "1"}, s.exit("L", "w1/g1", "1", "0"))
	require.Empty(t, s.records())

	// Two exclusive sections overlap; the later exit's update is lost.
	assert.Equal(t, reply{200, "1"}, s.enter("L", "w1/g2", "x"))
	assert.Equal(t, reply{200, "1"}, s.enter("L", "w2/g1", "x"))
	assert.Equal(t, reply{200, "2"}, s.exit("L", "w2/g1", "2", "1"))
	assert.Equal(t, reply{200, "2"}, s.exit("L", "w1/g2", "2", "1"))
	assert.Equal(t, []history.Record{
		{Kind: history.Overlap, Lock: "L", A: "w1/g2", B: "w2/g1"},
		{Kind: history.LostUpdate, Lock: "L", Value: 2, A: "w2/g1", B: "w1/g2"},
	}, withoutT(t, s.records()))

	assert.Equal(t, http.StatusNotFound, s.exit("L", "w1/g2", "3", "2").code, "not inside any more")
}

func TestUnfencedShared(t *testing.T) {
	s := newServer(t, map[string]int{"sem": 2}, false)
	// Unlimited readers; a writer overlaps with each of them.
	for _, who := range []string{"w1/g1", "w2/g1", "w3/g1"} {
		assert.Equal(t, 200, s.enter("rw", who, "s").code)
	}
	require.Empty(t, s.records())
	assert.Equal(t, 200, s.enter("rw", "w4/g1", "x").code)
	assert.Equal(t, reply{200, "0"}, s.exit("rw", "w1/g1", "7", "0"), "a shared exit writes nothing")

	// Two permits; a third holder overlaps with both.
	assert.Equal(t, 200, s.enter("sem", "w1/g2", "s").code)
	assert.Equal(t, 200, s.enter("sem", "w2/g2", "s").code)
	assert.Equal(t, 200, s.enter("sem", "w3/g2", "s").code)
	assert.Equal(t, []history.Record{
		{Kind: history.Overlap, Lock: "rw", A: "w1/g1", B: "w4/g1"},
		{Kind: history.Overlap, Lock: "rw", A: "w2/g1", B: "w4/g1"},
		{Kind: history.Overlap, Lock: "rw", A: "w3/g1", B: "w4/g1"},
		{Kind: history.Overlap, Lock: "sem", A: "w1/g2", B: "w3/g2"},
		{Kind: history.Overlap, Lock: "sem", A: "w2/g2", B: "w3/g2"},
	}, withoutT(t, s.records()))
}

func TestUnfencedEviction(t *testing.T) {
	s := newServer(t, nil, false)
	// An exit that never arrived: the worker's next enter evicts it.
	assert.Equal(t, 200, s.enter("L", "w1/g1", "x").code)
	assert.Equal(t, 200, s.enter("L", "w1/g2", "x").code)
	// A killed worker: the harness evicts it.
	assert.Equal(t, 200, s.enter("L", "w2/g1", "x").code)
	c, _ := s.do(http.MethodPost, "/unfenced/evict", "who", "w1")
	assert.Equal(t, 200, c)
	c, _ = s.do(http.MethodPost, "/unfenced/evict", "who", "w2")
	assert.Equal(t, 200, c)
	assert.Equal(t, 200, s.enter("L", "w3/g1", "x").code)
	assert.Equal(t, []history.Record{
		{Kind: history.Overlap, Lock: "L", A: "w1/g2", B: "w2/g1"},
	}, withoutT(t, s.records()))
}

func TestBadRequests(t *testing.T) {
	s := newServer(t, nil, false)
	for _, tc := range []struct {
		method, path string
		kv           []string
		want         int
	}{
		{http.MethodGet, "/fenced", []string{"lock", "L"}, 400},
		{http.MethodGet, "/fenced", []string{"lock", "L", "tok", "-1"}, 400},
		{http.MethodPost, "/fenced", []string{"lock", "L", "tok", "1"}, 400},
		{http.MethodPost, "/unfenced/enter", []string{"lock", "L", "who", "w1", "mode", "x"}, 400},
		{http.MethodPost, "/unfenced/enter", []string{"lock", "L", "who", "w1/g1", "mode", "y"}, 400},
		{http.MethodGet, "/unfenced/enter", []string{"lock", "L", "who", "w1/g1", "mode", "x"}, 405},
		{http.MethodGet, "/healthz", nil, 200},
	} {
		c, _ := s.do(tc.method, tc.path, tc.kv...)
		assert.Equal(t, tc.want, c, "%s %s %v", tc.method, tc.path, tc.kv)
	}
	assert.Empty(t, s.records())
}

func TestParseCaps(t *testing.T) {
	caps, err := parseCaps("dlock-semaphore=2,x=5")
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"dlock-semaphore": 2, "x": 5}, caps)
	for _, bad := range []string{"a", "a=0", "=2", "a=b"} {
		_, err := parseCaps(bad)
		assert.Error(t, err, bad)
	}
}

// withoutT checks every record's stamp and zeroes it, for comparison.
func withoutT(t *testing.T, recs []history.Record) []history.Record {
	t.Helper()
	for i := range recs {
		assert.NotZero(t, recs[i].T)
		recs[i].T = 0
	}
	return recs
}

// The fenced register behind httpfence.Middleware (-guard http): the token
// comes in httpfence's header, a stale one gets 409 (from the middleware,
// or from the handler's check with the same guard), a missing one 428;
// admitted writes are logged as /fenced's are.
func TestGuarded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resource.jsonl")
	lw, err := history.Create(path)
	require.NoError(t, err)
	r := newResource(lw, nil, false)
	r.guarded(fence.NewMemoryGuard())
	srv := httptest.NewServer(r)
	cli := &http.Client{Timeout: 10 * time.Second, Transport: &httpfence.Transport{}}
	defer func() {
		cli.CloseIdleConnections()
		srv.Close()
		assert.NoError(t, lw.Close())
	}()
	do := func(method string, tok uint64, q string) (int, string) {
		t.Helper()
		ctx := t.Context()
		if tok != 0 {
			ctx = fence.NewContext(ctx, fence.Token{Name: "L", Seq: tok})
		}
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+"/guarded?lock=L"+q, nil)
		require.NoError(t, err)
		resp, err := cli.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, strings.TrimSpace(string(body))
	}
	c, b := do(http.MethodPost, 5, "&v=1")
	assert.Equal(t, http.StatusOK, c, b)
	c, b = do(http.MethodGet, 5, "")
	assert.Equal(t, []any{http.StatusOK, "1"}, []any{c, b})
	c, _ = do(http.MethodPost, 4, "&v=2")
	assert.Equal(t, http.StatusConflict, c)
	c, _ = do(http.MethodGet, 0, "")
	assert.Equal(t, http.StatusPreconditionRequired, c)
	// The guard admitted 7 (a read raises its mark): a write of 6 is
	// refused.
	c, _ = do(http.MethodGet, 7, "")
	assert.Equal(t, http.StatusOK, c)
	c, _ = do(http.MethodPost, 6, "&v=3")
	assert.Equal(t, http.StatusConflict, c)
	recs, err := history.ReadLines[history.Record](path)
	require.NoError(t, err)
	assert.Equal(t, []history.Record{{Kind: history.Write, Lock: "L", T: recs[0].T, Tok: 5, Value: 1}}, recs)
}
