package dlock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/retry"
)

// probeTimeout bounds the diagnosis of a failed connection.
const probeTimeout = time.Second

// probeBudget is the time left to ctx, at most probeTimeout (a second when
// ctx has no deadline).
func probeBudget(ctx context.Context) time.Duration {
	d := probeTimeout
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return max(d, 10*time.Millisecond)
}

// explain adds to err, the failure to reach cfg's servers, what a probe
// of each endpoint says about why: an endpoint that does not accept
// connections, a Redis server at an etcd DSN (or etcd at a Redis one), a
// plaintext client at a TLS server (or the reverse), an untrusted
// certificate, a missing client certificate. etcd's client only reports
// a deadline in those cases. The endpoints are probed
// together, on that failure path only; one that fails while others answer
// is named as such, so that a dead member is not blamed for a cluster
// that has no leader.
func explain(ctx context.Context, err error, cfg Config) error {
	if len(cfg.Endpoints) == 0 {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probeBudget(ctx))
	defer cancel()
	whys := make([]string, len(cfg.Endpoints))
	var wg sync.WaitGroup
	for i, ep := range cfg.Endpoints {
		wg.Go(func() { whys[i] = diagnose(ctx, ep, cfg.TLS, cfg.Backend == BackendEtcd) })
	}
	wg.Wait()
	var bad []string
	for _, why := range whys {
		if why != "" {
			bad = append(bad, why)
		}
	}
	answer := len(whys) - len(bad)
	etcd, n := cfg.Backend == BackendEtcd, len(whys)
	var why string
	switch {
	case etcd && retry.Transient(err) && answer > n/2:
		why = "etcd has no leader, or lost it: the members answer, but none could serve the request in time (an election, or a majority cut off from each other)"
	case len(bad) == 0:
		return err
	case etcd && answer > 0 && answer <= n/2:
		why = strings.Join(bad, "; ") + fmt.Sprintf("; %d of %d members answer, and etcd needs a majority", answer, n)
	case answer > 0:
		why = strings.Join(bad, "; ") + fmt.Sprintf("; the other %d answer", answer)
	default:
		why = strings.Join(bad, "; ")
	}
	return fmt.Errorf("%w (%s)", err, why)
}

// diagnose dials addr and tries the TLS handshake that cfg implies; with
// plaintext it first greets the server, to tell etcd from Redis (etcd
// says which the backend is).
func diagnose(ctx context.Context, addr string, cfg *tls.Config, etcd bool) string {
	conn, err := dial(ctx, addr)
	if err != nil {
		return fmt.Sprintf("%s does not accept connections: %v", addr, err)
	}
	defer conn.Close()
	host, _, _ := net.SplitHostPort(addr)
	if cfg == nil {
		// Plaintext configured: is the server the other backend, or does
		// it speak TLS? (A TLS handshake stalls at Redis: it waits for the
		// end of a line.)
		switch found := identify(ctx, addr); {
		case etcd && found == "redis":
			return addr + " is a Redis server, not etcd: use redis:// or redlock://"
		case !etcd && found == "etcd":
			return addr + " speaks HTTP/2 (gRPC), as etcd does, not Redis: use etcd://"
		case found != "":
			return ""
		}
		tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, ServerName: host})
		if tc.HandshakeContext(ctx) == nil {
			return fmt.Sprintf("%s speaks TLS, and this client plaintext: use a TLS scheme (etcds://, rediss://) with cacert, or set Config.TLS", addr)
		}
		return ""
	}
	c := cfg.Clone()
	if c.ServerName == "" {
		c.ServerName = host
	}
	tc := tls.Client(conn, c)
	if err := tc.HandshakeContext(ctx); err != nil {
		if errors.Is(err, io.EOF) && identify(ctx, addr) != "" {
			return "TLS handshake with " + addr + ": the server speaks plaintext: use a plaintext scheme (etcd://, redis://) or no Config.TLS"
		}
		return "TLS handshake with " + addr + ": " + hint(err)
	}
	// In TLS 1.3 the server checks the client certificate after the
	// client's side of the handshake: its verdict comes with the first read.
	tc.SetReadDeadline(time.Now().Add(probeTimeout / 4))
	if _, err := tc.Read(make([]byte, 1)); err != nil && isAlert(err) {
		return "TLS with " + addr + ": " + hint(err)
	}
	return ""
}

// identify greets addr in plaintext with the HTTP/2 client preface that
// gRPC (etcd) opens with, and tells the server by its answer: "etcd" for
// an HTTP/2 SETTINGS frame, "redis" for a Redis reply (Redis takes the
// preface for an unknown command, and says so at once), "" for anything
// else.
func identify(ctx context.Context, addr string) string {
	conn, err := dial(ctx, addr)
	if err != nil {
		return ""
	}
	defer conn.Close()
	// The client preface and an empty SETTINGS frame; an HTTP/2 server
	// answers with its own SETTINGS frame (type 4, the 4th byte).
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		return ""
	}
	b := make([]byte, 9)
	if _, err := io.ReadAtLeast(conn, b, 4); err != nil {
		return ""
	}
	switch {
	case b[3] == 4:
		return "etcd"
	case b[0] == '-' || b[0] == '+':
		return "redis"
	}
	return ""
}

// dial connects to addr, with ctx's deadline on the connection.
func dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		if dl, ok := ctx.Deadline(); ok {
			conn.SetDeadline(dl)
		}
	}
	return conn, err
}

func isAlert(err error) bool {
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout()) && strings.Contains(err.Error(), "tls:")
}

// hint says what a TLS error means for the user's configuration.
func hint(err error) string {
	msg := err.Error()
	var why string
	switch {
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		why = "the server speaks plaintext: use a plaintext scheme (etcd://, redis://) or no Config.TLS"
	case strings.Contains(msg, "certificate required"), strings.Contains(msg, "bad certificate"):
		why = "the server requires a client certificate signed by a CA it trusts: give cert and key (Config.TLS.Certificates)"
	case strings.Contains(msg, "unknown authority"):
		why = "the server's certificate is not signed by a CA this client trusts: check cacert (Config.TLS.RootCAs)"
	case strings.Contains(msg, "not valid for"), strings.Contains(msg, "doesn't contain any IP SANs"):
		why = "the server's certificate is for another name: set server_name (Config.TLS.ServerName)"
	default:
		return msg
	}
	return msg + ": " + why
}
