package etcdtest

import (
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a fault-injecting TCP proxy between clients and one server (an
// etcd member, a Redis server): it can drop the bytes of either direction
// (the connections stay open, so a client notices only through its own
// timeouts) or delay them. Tx is the clients' direction, Rx the server's.
// Its methods are safe for concurrent use.
type Proxy struct {
	ln net.Listener
	to string

	mu     sync.Mutex
	tx, rx link
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// link is the state of one direction.
type link struct {
	drop            bool
	latency, jitter time.Duration
}

// ProxyTo starts a TCP fault proxy to addr (host:port) on a free loopback
// port, closed by t.Cleanup.
func ProxyTo(t testing.TB, addr string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdtest: proxy: %v", err)
	}
	p := &Proxy{ln: ln, to: addr, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.serve)
	t.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's listening address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Blackhole drops all traffic in both directions.
func (p *Proxy) Blackhole() { p.set(func() { p.tx.drop, p.rx.drop = true, true }) }

// Unblackhole lets traffic through again.
func (p *Proxy) Unblackhole() { p.set(func() { p.tx.drop, p.rx.drop = false, false }) }

// BlackholeTx drops the clients' traffic to the server.
func (p *Proxy) BlackholeTx() { p.set(func() { p.tx.drop = true }) }

// UnblackholeTx lets the clients' traffic through again.
func (p *Proxy) UnblackholeTx() { p.set(func() { p.tx.drop = false }) }

// BlackholeRx drops the server's traffic to the clients.
func (p *Proxy) BlackholeRx() { p.set(func() { p.rx.drop = true }) }

// UnblackholeRx lets the server's traffic through again.
func (p *Proxy) UnblackholeRx() { p.set(func() { p.rx.drop = false }) }

// DelayTx delays each chunk of the clients' traffic by latency plus a
// random part up to jitter.
func (p *Proxy) DelayTx(latency, jitter time.Duration) {
	p.set(func() { p.tx.latency, p.tx.jitter = latency, jitter })
}

// UndelayTx ends DelayTx.
func (p *Proxy) UndelayTx() { p.DelayTx(0, 0) }

// DelayRx delays each chunk of the server's traffic by latency plus a
// random part up to jitter.
func (p *Proxy) DelayRx(latency, jitter time.Duration) {
	p.set(func() { p.rx.latency, p.rx.jitter = latency, jitter })
}

// UndelayRx ends DelayRx.
func (p *Proxy) UndelayRx() { p.DelayRx(0, 0) }

func (p *Proxy) set(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f()
}

// Close stops the proxy and closes its connections; it returns once every
// goroutine of the proxy has exited. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		p.ln.Close()
		for c := range p.conns {
			c.Close()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", p.to, 5*time.Second)
		if err != nil {
			in.Close()
			continue
		}
		if !p.track(in, out) {
			return
		}
		p.wg.Go(func() { p.pipe(in, out, func() link { return p.tx }) })
		p.wg.Go(func() { p.pipe(out, in, func() link { return p.rx }) })
	}
}

// track records the connections; false if the proxy is closed (they are
// closed then).
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

// pipe copies from src to dst as the direction's link says, until either
// side closes; it then closes both.
func (p *Proxy) pipe(src, dst net.Conn, state func() link) {
	defer func() {
		src.Close()
		dst.Close()
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			l := state()
			p.mu.Unlock()
			if l.latency > 0 || l.jitter > 0 {
				time.Sleep(l.latency + rand.N(l.jitter+1)) // the fault itself: this direction is slow
			}
			if !l.drop {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}
