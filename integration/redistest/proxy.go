package redistest

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections from its own loopback address to a
// target, and can blackhole them: while blackholed it drops every byte in
// both directions but keeps the connections open, like a network
// partition that neither side notices before its own timeouts. Its
// methods are safe for concurrent use. It is closed when the test that
// started it ends.
type Proxy struct {
	ln     net.Listener
	target string

	mu         sync.Mutex
	blackholed bool
	closed     bool
	conns      map[net.Conn]struct{}
	wg         sync.WaitGroup
}

// NewProxy starts a proxy to target on a free loopback port.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy: listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's "127.0.0.1:port" address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port returns the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Blackhole starts dropping all traffic (existing and new connections).
func (p *Proxy) Blackhole() { p.set(true) }

// Unblackhole forwards traffic again; what was dropped stays lost.
func (p *Proxy) Unblackhole() { p.set(false) }

func (p *Proxy) set(b bool) {
	p.mu.Lock()
	p.blackholed = b
	p.mu.Unlock()
}

func (p *Proxy) dropping() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blackholed
}

// Close stops the proxy, closes its connections and waits for its
// goroutines. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// track registers c; it reports false (and closes c) once the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(in) {
			return
		}
		p.wg.Go(func() {
			out, err := net.Dial("tcp", p.target)
			if err != nil || !p.track(out) {
				_ = in.Close()
				return
			}
			var wg sync.WaitGroup
			wg.Go(func() { p.pipe(out, in) })
			wg.Go(func() { p.pipe(in, out) })
			wg.Wait()
			p.mu.Lock()
			delete(p.conns, in)
			delete(p.conns, out)
			p.mu.Unlock()
		})
	}
}

// pipe copies src to dst (dropping while blackholed) until either fails,
// then closes both.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.dropping() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
