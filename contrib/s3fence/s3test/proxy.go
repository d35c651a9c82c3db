package s3test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// ConditionHeaders are the headers of S3's conditional writes.
var ConditionHeaders = []string{"If-Match", "If-None-Match"}

// ProxyConfig says what a Proxy does to the requests it forwards.
type ProxyConfig struct {
	// Strip names headers to remove from every request before forwarding
	// it. With ConditionHeaders the server sees unconditional writes, and
	// the client sees a store that accepts conditional writes and ignores
	// them. SigV4 signs every header but a few (the client's signature
	// covers If-Match), so the proxy signs a request it stripped again,
	// with the server's credentials, keeping the client's payload hash
	// (X-Amz-Content-Sha256), which still describes the body it forwards
	// unchanged. Optional: by default requests pass unchanged.
	Strip []string

	// CheckThenWrite, when positive, makes the proxy a store whose
	// conditional writes are not atomic: it evaluates a PUT's If-Match or
	// If-None-Match: * itself, against a HEAD of the object, answers 412
	// if the condition fails, and otherwise forwards the PUT without it
	// (signed again). A write whose check passed waits, up to
	// CheckThenWrite, for another conditional PUT of the same key to pass
	// its check too; then that one writes first and the waiting one over
	// it, both having checked the same version. One request at a time it
	// is indistinguishable from a correct store; concurrent writers all
	// pass their checks, as on versitygw before v1.8.0 (versitygw#2288) or
	// seaweedfs#8800. Optional, defaults to 0: off.
	CheckThenWrite time.Duration

	// Wrap, if set, wraps the transport that carries requests to the
	// server (after any stripping and signing): a test's hook to delay,
	// lose or inspect requests and responses. The request's context ends
	// when the client gives up on it. Optional.
	Wrap func(next http.RoundTripper) http.RoundTripper
}

// Proxy is an HTTP reverse proxy in front of a Server, on a free loopback
// port. It is closed when the test that started it ends.
type Proxy struct {
	// Endpoint is the proxy's base URL, "http://127.0.0.1:<port>".
	Endpoint string

	target   *Server
	srv      *http.Server
	upstream *http.Transport
	served   chan struct{}
	handlers sync.WaitGroup
	once     sync.Once
}

// StartProxy starts a proxy to s configured by c; it is closed by
// t.Cleanup.
func StartProxy(t testing.TB, s *Server, c ProxyConfig) *Proxy {
	t.Helper()
	target, err := url.Parse(s.Endpoint)
	if err != nil {
		t.Fatalf("s3test: proxy: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("s3test: proxy: listen: %v", err)
	}
	upstream := http.DefaultTransport.(*http.Transport).Clone()
	var rt http.RoundTripper = upstream
	if c.Wrap != nil {
		rt = c.Wrap(rt)
	}
	if len(c.Strip) > 0 {
		rt = &stripper{next: rt, headers: c.Strip, server: s, signer: v4.NewSigner()}
	}
	if c.CheckThenWrite > 0 {
		rt = &checker{
			next:   &stripper{next: rt, headers: ConditionHeaders, server: s, signer: v4.NewSigner()},
			window: c.CheckThenWrite,
			passed: map[string]chan struct{}{},
		}
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // the host the client signed
		},
		Transport: rt,
		ErrorLog:  nil,
	}
	p := &Proxy{
		Endpoint: "http://" + ln.Addr().String(),
		target:   s,
		upstream: upstream,
		served:   make(chan struct{}),
	}
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.handlers.Add(1)
			defer p.handlers.Done()
			rp.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		defer close(p.served)
		_ = p.srv.Serve(ln)
	}()
	t.Cleanup(p.Close)
	return p
}

// Close stops the proxy: it closes its listener and connections, and
// waits for the requests in flight to end. It is idempotent.
func (p *Proxy) Close() {
	p.once.Do(func() {
		_ = p.srv.Close() // ends every request's context
		<-p.served
		p.handlers.Wait()
		p.upstream.CloseIdleConnections()
	})
}

// Client returns a client for the proxy with the server's credentials,
// as Server.Client does.
func (p *Proxy) Client(t testing.TB, optFns ...func(*s3.Options)) *s3.Client {
	t.Helper()
	return newClient(t, p.Endpoint, p.target.AccessKey, p.target.SecretKey, optFns...)
}

// Env is Server.Env for the proxy: a child process talks to the server
// through it.
func (p *Proxy) Env() []string {
	return sdkEnv(p.Endpoint, p.target.AccessKey, p.target.SecretKey)
}

// stripper drops headers and signs the request again (or for the first
// time: a request of the proxy's own).
type stripper struct {
	next    http.RoundTripper
	headers []string
	server  *Server
	signer  *v4.Signer
}

func (s *stripper) RoundTrip(r *http.Request) (*http.Response, error) {
	stripped := false
	for _, h := range s.headers {
		stripped = stripped || r.Header.Get(h) != ""
	}
	if !stripped && r.Header.Get("Authorization") != "" {
		return s.next.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	for _, h := range s.headers {
		r.Header.Del(h)
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		return nil, errors.New("s3test: proxy: request without X-Amz-Content-Sha256: cannot sign it again")
	}
	r.Header.Del("Authorization")
	r.Header.Del("X-Amz-Date")
	creds := aws.Credentials{AccessKeyID: s.server.AccessKey, SecretAccessKey: s.server.SecretKey}
	err := s.signer.SignHTTP(r.Context(), creds, r, payload, "s3", Region, time.Now(), func(o *v4.SignerOptions) {
		o.DisableURIPathEscaping = true // as the S3 client signs
	})
	if err != nil {
		return nil, fmt.Errorf("s3test: proxy: sign: %w", err)
	}
	return s.next.RoundTrip(r)
}

// checker evaluates conditional PUTs itself and forwards them without
// their conditions: a check-then-write store.
type checker struct {
	next   http.RoundTripper // strips the conditions and signs again
	window time.Duration

	mu     sync.Mutex
	passed map[string]chan struct{} // per path, a write waiting for a partner: closed when the partner has written
}

func (c *checker) RoundTrip(r *http.Request) (*http.Response, error) {
	ifMatch, ifNoneMatch := r.Header.Get("If-Match"), r.Header.Get("If-None-Match")
	if r.Method != http.MethodPut || ifMatch == "" && ifNoneMatch == "" {
		return c.next.RoundTrip(r)
	}
	head, err := http.NewRequestWithContext(r.Context(), http.MethodHead, r.URL.String(), nil)
	if err != nil {
		return nil, err
	}
	head.Host = r.Host
	head.Header.Set("X-Amz-Content-Sha256", emptySHA256) // the stripper signs it
	resp, err := c.next.RoundTrip(head)
	if err != nil {
		return nil, err
	}
	_ = resp.Body.Close()
	exists := resp.StatusCode == http.StatusOK
	etag := resp.Header.Get("ETag")
	if ifNoneMatch == "*" && exists || ifMatch != "" && (!exists || strings.Trim(ifMatch, `"`) != strings.Trim(etag, `"`)) {
		return preconditionFailed(r), nil
	}
	// The check passed. Pair this write with another conditional PUT of
	// the same key whose check passed too: the second one writes at once,
	// the first one after it, over it (or after the window, unpaired).
	c.mu.Lock()
	done, paired := c.passed[r.URL.Path]
	if paired {
		delete(c.passed, r.URL.Path)
	} else {
		done = make(chan struct{})
		c.passed[r.URL.Path] = done
	}
	c.mu.Unlock()
	if paired {
		defer close(done)
		return c.next.RoundTrip(r)
	}
	t := time.NewTimer(c.window)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-r.Context().Done():
	}
	c.mu.Lock()
	if c.passed[r.URL.Path] == done {
		delete(c.passed, r.URL.Path)
	}
	c.mu.Unlock()
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	return c.next.RoundTrip(r)
}

// emptySHA256 is the SHA-256 of an empty payload, in hex.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// preconditionFailed is S3's 412 answer to r.
func preconditionFailed(r *http.Request) *http.Response {
	return ErrorResponse(r, http.StatusPreconditionFailed, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
}

// ErrorResponse is an S3 error response to r, as a server sends it: status,
// and an XML body with code and msg. A ProxyConfig.Wrap can answer with it
// in the server's place.
func ErrorResponse(r *http.Request, status int, code, msg string) *http.Response {
	body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + code + `</Code><Message>` + msg + `</Message></Error>`
	return &http.Response{
		StatusCode:    status,
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/xml"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       r,
	}
}
