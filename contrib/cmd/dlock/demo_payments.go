package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// payments is the demo's payment API: like most, it cannot check a fencing
// token, but it deduplicates by Idempotency-Key, as the IETF draft
// (draft-ietf-httpapi-idempotency-key-header) and Stripe do. A request
// without the header charges. A request with a key charges the first time
// and stores its response; the same key again gets the stored response
// (marked "Idempotent-Replayed: true", as at Stripe) and charges nothing;
// the same key with another payload is refused with 422, and while the
// first request with the key is in flight, with 409. Keys are kept for
// the process's life (Stripe keeps them 24 hours).
//
// It serves HTTP on loopback, so that the key travels as a real header.
// A payments is safe for concurrent use; close stops its server.
type payments struct {
	url  string
	tag  string // in charge ids: "ch_<tag>_<n>"
	srv  *http.Server
	cli  *http.Client
	done chan struct{} // closed when the server's Serve returns

	mu      sync.Mutex
	ids     int               // charges made, for their ids
	charges map[string]int    // invoice → charges made
	keys    map[string]*keyed // Idempotency-Key → its first request
}

// keyed is the first request seen with an Idempotency-Key.
type keyed struct {
	payload string
	status  int
	body    []byte // nil while the request is in flight
}

// charge is a charge as the API returns it.
type charge struct {
	ID      string `json:"id"`
	Invoice string `json:"invoice"`
	Amount  int    `json:"amount"` // in cents
}

// startPayments starts a payment API on a loopback port the kernel picks;
// its charge ids carry tag.
func startPayments(tag string) (*payments, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: payment API: %w", err)
	}
	p := &payments{
		url:     "http://" + l.Addr().String(),
		tag:     tag,
		cli:     &http.Client{Transport: &http.Transport{}},
		done:    make(chan struct{}),
		charges: map[string]int{},
		keys:    map[string]*keyed{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", p.serveCharge)
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(l) // returns http.ErrServerClosed on close
	}()
	return p, nil
}

// close stops the server and returns after it stopped.
func (p *payments) close() {
	p.cli.CloseIdleConnections()
	p.srv.Close()
	<-p.done
}

// count returns the charges made for invoice.
func (p *payments) count(invoice string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.charges[invoice]
}

func (p *payments) serveCharge(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil || form.Get("invoice") == "" {
		http.Error(w, "want invoice=…&amount=…", http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	payload := string(body)
	if key != "" {
		p.mu.Lock()
		k, seen := p.keys[key]
		if !seen {
			p.keys[key] = &keyed{payload: payload}
		}
		p.mu.Unlock()
		if seen {
			p.replay(w, k, payload)
			return
		}
	}

	var amount int
	fmt.Sscan(form.Get("amount"), &amount)
	p.mu.Lock()
	p.ids++
	c := charge{ID: fmt.Sprintf("ch_%s_%d", p.tag, p.ids), Invoice: form.Get("invoice"), Amount: amount}
	p.charges[c.Invoice]++
	p.mu.Unlock()
	resp, _ := json.Marshal(c)
	if key != "" {
		p.mu.Lock()
		p.keys[key].status, p.keys[key].body = http.StatusOK, resp
		p.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(resp)
}

// replay answers a request whose key was seen before: the stored response
// for the same payload, 422 for another, 409 while the first is in flight.
func (p *payments) replay(w http.ResponseWriter, k *keyed, payload string) {
	p.mu.Lock()
	status, body := k.status, k.body
	p.mu.Unlock()
	switch {
	case k.payload != payload:
		http.Error(w, "this Idempotency-Key was used with another payload", http.StatusUnprocessableEntity)
	case body == nil:
		http.Error(w, "a request with this Idempotency-Key is in flight", http.StatusConflict)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(status)
		w.Write(body)
	}
}

// charge asks the API to charge invoice 42.00, with key as the request's
// Idempotency-Key unless key is "". It returns the charge and whether the
// API replayed a stored response.
func (p *payments) charge(ctx context.Context, invoice, key string) (_ charge, replayed bool, _ error) {
	form := url.Values{"invoice": {invoice}, "amount": {"4200"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url+"/v1/charges", strings.NewReader(form.Encode()))
	if err != nil {
		return charge{}, false, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := p.cli.Do(req)
	if err != nil {
		return charge{}, false, fmt.Errorf("demo: payment API: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return charge{}, false, fmt.Errorf("demo: payment API: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return charge{}, false, fmt.Errorf("demo: payment API: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var c charge
	if err := json.Unmarshal(body, &c); err != nil {
		return charge{}, false, fmt.Errorf("demo: payment API: %w", err)
	}
	return c, resp.Header.Get("Idempotent-Replayed") == "true", nil
}
