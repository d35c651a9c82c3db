package s3test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
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

// stripper drops headers and signs the request again.
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
	if !stripped {
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
