// Command payments is the payment API of the cluster harness's payments
// workload (docs/faults.md): a resource that cannot check a fencing token
// but deduplicates requests by their idempotency key, as the IETF httpapi
// draft "The Idempotency-Key HTTP Header Field"
// (draft-ietf-httpapi-idempotency-key-header) and Stripe's idempotent
// requests describe. Every charge it makes is appended to an audit
// (history.Charge JSONL, synced to disk before the reply): the checker's
// record of the effects.
//
// Usage:
//
//	payments -listen 10.0.0.2:8081 -audit run/payments/payments-journal.audit.jsonl [-window 24h] [-delay 150ms]
//
// POST /charge takes the body {"order":N,"amount":A} (N >= 1, A >= 1, in
// cents), an optional Idempotency-Key header (a structured-field string:
// the key in double quotes, '"' and '\' escaped by '\'), and an optional
// Dlock-Fence-Token header, recorded in the audit and never checked (this
// resource cannot check a token):
//
//   - no key: the charge is made, every time; 201 and the charge as JSON;
//   - a key not seen within the window: the key is claimed, the charge is
//     made, and the reply (201) is stored for the key for -window;
//   - the key and the same payload (order and amount), its reply stored:
//     that reply again, with the header Idempotent-Replayed: true, and no
//     charge;
//   - the key and another payload: 422;
//   - the key while its first request is still processed: 409 (retry
//     later, unchanged);
//   - a malformed key (or more than one) or body: 400.
//
// Each charge takes -delay to process, and the processing goes on when the
// client goes away: a killed client's charge is made, which is what
// leaves the call's outcome unknown to it. A key's window runs from the
// moment its reply was stored; once it has passed, the key is as if never
// seen. A processing that fails (the audit cannot be written) releases its
// key and answers 500. The stored replies are in memory: a restarted
// server forgets them (the harness never restarts it).
//
// GET /healthz answers 200. It prints "LISTEN <addr>" on stdout once it
// accepts connections, and exits 0 on SIGTERM or SIGINT once the requests
// under way are answered (1 on any other error, logged to stderr).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/history"
	"github.com/dlock-go/dlock/integration/cluster/internal/httpserve"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve HTTP on")
	auditPath := flag.String("audit", "payments.audit.jsonl", "path of the audit (history.Charge JSONL)")
	window := flag.Duration("window", 24*time.Hour, "how long a key's stored reply is kept")
	delay := flag.Duration("delay", 150*time.Millisecond, "how long a charge takes to process")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("payments: ")
	if err := run(*listen, *auditPath, *window, *delay); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(listen, auditPath string, window, delay time.Duration) error {
	if window <= 0 || delay < 0 {
		return fmt.Errorf("-window %v, -delay %v: want a positive window and a delay >= 0", window, delay)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	audit, err := history.Create(auditPath)
	if err != nil {
		return err
	}
	s := newServer(audit, window, delay)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		audit.Close()
		return err
	}
	log.Printf("listening on %s, audit %s, window %v, delay %v", ln.Addr(), auditPath, window, delay)
	err = httpserve.Run(ctx, ln, s, s.failed, 5*time.Second+delay)
	if e := audit.Close(); err == nil {
		err = e
	}
	log.Printf("stopped: %s", s.summary())
	return err
}

// server is the payment API. It is safe for concurrent use: mu orders the
// keys' claims and replies, the audit's writer orders the charges.
type server struct {
	audit   *history.Writer
	window  time.Duration
	delay   time.Duration
	now     func() time.Time
	process func()     // a charge's processing time (tests replace it)
	failed  chan error // the first audit write error: the run's evidence is broken
	mux     *http.ServeMux

	mu      sync.Mutex
	keys    map[string]*entry
	charges int64          // charges made (the last charge ID)
	counts  map[string]int // replies by kind, for the log
	once    sync.Once
}

// payload is a charge request's body; two requests with one key must
// carry equal payloads.
type payload struct {
	Order  int64 `json:"order"`
	Amount int64 `json:"amount"`
}

// entry is a key's state: claimed by a request under way, or its reply
// stored until expires.
type entry struct {
	req     payload
	done    bool // the reply is stored
	status  int
	body    []byte
	expires time.Time
}

// reply is a charge made, as the API answers it.
type reply struct {
	ID     string `json:"id"`
	Order  int64  `json:"order"`
	Amount int64  `json:"amount"`
	Status string `json:"status"`
}

func newServer(audit *history.Writer, window, delay time.Duration) *server {
	s := &server{
		audit: audit, window: window, delay: delay, now: time.Now,
		process: func() { time.Sleep(delay) },
		failed:  make(chan error, 1), mux: http.NewServeMux(),
		keys: map[string]*entry{}, counts: map[string]int{},
	}
	s.mux.HandleFunc("POST /charge", s.charge)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	return s
}

func (s *server) ServeHTTP(w http.ResponseWriter, req *http.Request) { s.mux.ServeHTTP(w, req) }

// The headers: the idempotency key's (the draft's), the fencing token's
// (contrib/httpfence's; recorded, never checked), and the one that marks a
// stored reply sent again.
const (
	headerKey      = "Idempotency-Key"
	headerToken    = "Dlock-Fence-Token"
	headerReplayed = "Idempotent-Replayed"
)

// charge serves POST /charge.
func (s *server) charge(w http.ResponseWriter, req *http.Request) {
	var p payload
	dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil || p.Order < 1 || p.Amount < 1 {
		s.refuse(w, http.StatusBadRequest, "bad body", fmt.Sprintf("want {\"order\":N,\"amount\":A} with N, A >= 1 (%v)", err))
		return
	}
	key, hasKey, err := idempotencyKey(req.Header)
	if err != nil {
		s.refuse(w, http.StatusBadRequest, "bad key", err.Error())
		return
	}
	if hasKey && !s.claim(w, key, p) {
		return
	}
	// The processing, whatever becomes of the client: it is not given
	// the request's context.
	s.process()
	status, body, err := s.make(p, key, req.Header.Get(headerToken))
	if err != nil {
		if hasKey {
			s.release(key)
		}
		s.once.Do(func() { s.failed <- fmt.Errorf("audit: %w", err) })
		s.refuse(w, http.StatusInternalServerError, "audit", err.Error())
		return
	}
	if hasKey {
		s.store(key, status, body)
	}
	s.count("charged")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body) //nolint:errcheck // the client may be gone: the charge is made
}

// claim looks key up. It claims a key not seen (or expired) for p and
// returns true; otherwise it answers the request (the stored reply, 409 or
// 422) and returns false.
func (s *server) claim(w http.ResponseWriter, key string, p payload) bool {
	s.mu.Lock()
	e := s.keys[key]
	if e != nil && e.done && !s.now().Before(e.expires) {
		delete(s.keys, key) // expired: as if never seen
		e = nil
	}
	switch {
	case e == nil:
		s.keys[key] = &entry{req: p}
		s.mu.Unlock()
		return true
	case e.req != p:
		s.mu.Unlock()
		s.refuse(w, http.StatusUnprocessableEntity, "key reused with another payload",
			fmt.Sprintf("Idempotency-Key %q was first used for order %d, amount %d", key, e.req.Order, e.req.Amount))
		return false
	case !e.done:
		s.mu.Unlock()
		s.refuse(w, http.StatusConflict, "a request is outstanding for this key",
			fmt.Sprintf("the first request with Idempotency-Key %q is being processed", key))
		return false
	}
	status, body := e.status, e.body
	s.mu.Unlock()
	s.count("replayed")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(headerReplayed, "true")
	w.WriteHeader(status)
	w.Write(body) //nolint:errcheck // the client may be gone
	return false
}

// make makes the charge: its audit record, synced, then its reply.
func (s *server) make(p payload, key, token string) (int, []byte, error) {
	s.mu.Lock()
	s.charges++
	id := fmt.Sprintf("ch_%d", s.charges)
	s.mu.Unlock()
	c := history.Charge{T: s.now().UnixNano(), ID: id, Order: p.Order, Amount: p.Amount, Key: key, Token: token}
	if err := s.audit.Write(c); err != nil {
		return 0, nil, err
	}
	if err := s.audit.Sync(); err != nil {
		return 0, nil, err
	}
	body, err := json.Marshal(reply{ID: id, Order: p.Order, Amount: p.Amount, Status: "succeeded"})
	return http.StatusCreated, body, err
}

// store keeps key's reply for the window.
func (s *server) store(key string, status int, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.keys[key]; e != nil {
		e.done, e.status, e.body, e.expires = true, status, body, s.now().Add(s.window)
	}
}

// release forgets key's claim (its processing failed: nothing is stored).
func (s *server) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, key)
}

// refuse answers with a problem (RFC 9457) of status.
func (s *server) refuse(w http.ResponseWriter, status int, title, detail string) {
	s.count(fmt.Sprint(status))
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"title": title, "detail": detail}) //nolint:errcheck // the client may be gone
}

func (s *server) count(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts[kind]++
}

// summary says how many requests got each reply.
func (s *server) summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%d charges; replies %v", s.charges, s.counts)
}

// idempotencyKey returns the request's Idempotency-Key: the header's
// structured-field string, unquoted. ok is false when there is none; an
// error when there is more than one, or one that is not an sf-string.
func idempotencyKey(h http.Header) (key string, ok bool, err error) {
	vs := h.Values(headerKey)
	switch len(vs) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", false, fmt.Errorf("%d %s fields (at most one)", len(vs), headerKey)
	}
	key, err = parseSFString(vs[0])
	if err == nil && key == "" {
		err = errors.New("an empty key")
	}
	if err != nil {
		return "", false, fmt.Errorf("%s %q: %w", headerKey, vs[0], err)
	}
	return key, true, nil
}

// parseSFString parses an Item whose bare item is an sf-string (RFC 8941
// section 4.2.5): surrounding spaces are allowed, parameters after it
// (";name=value") are ignored.
func parseSFString(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if v == "" || v[0] != '"' {
		return "", errors.New(`not a structured-field string (want "…")`)
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			i++
			if i == len(v) || v[i] != '"' && v[i] != '\\' {
				return "", errors.New(`a '\' escapes only '"' and '\'`)
			}
			b.WriteByte(v[i])
		case c == '"':
			if rest := v[i+1:]; rest != "" && rest[0] != ';' {
				return "", fmt.Errorf("%q after the string", rest)
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("byte %#02x is not printable ASCII", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("no closing '\"'")
}
