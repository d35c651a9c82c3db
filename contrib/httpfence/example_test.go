package httpfence_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/dlock-go/dlock/contrib/httpfence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/intent"
	"github.com/dlock-go/dlock/lock/locktest"
)

// A resource server behind Middleware, and a client whose Transport sends
// the token from each request's context. The holder of token 41 is turned
// away once token 42 has been admitted.
func ExampleMiddleware() {
	guard := fence.NewMemoryGuard() // or pgfence, redisfence
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := fence.FromContext(r.Context()) // the token Middleware admitted
		if !ok {
			http.Error(w, "no token", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "written with %s", tok)
	})
	srv := httptest.NewServer(httpfence.Middleware(guard)(handler))
	defer srv.Close()

	client := &http.Client{Transport: &httpfence.Transport{Base: srv.Client().Transport}}
	send := func(seq uint64) {
		ctx := fence.NewContext(context.Background(), fence.Token{Name: "accounts/7", Seq: seq})
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, nil)
		if err != nil {
			log.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %s\n", resp.StatusCode, body)
	}
	send(41)
	send(42)
	send(41) // the paused holder wakes up
	// Output:
	// 200 written with accounts/7:41
	// 200 written with accounts/7:42
	// 409 fence: stale token for "accounts/7": seq 41 is below the highest admitted seq 42
}

// Transport on its own: the token travels in the Dlock-Fence-Token header.
func ExampleTransport() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println(httpfence.Header+":", r.Header.Get(httpfence.Header))
	}))
	defer srv.Close()

	client := &http.Client{Transport: &httpfence.Transport{Base: srv.Client().Transport}}
	ctx := fence.NewContext(context.Background(), fence.Token{Name: "orders/eu", Seq: 7})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	if err != nil {
		log.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	// Output:
	// Dlock-Fence-Token: orders/eu:7
}

// With an intent journal, at a resource that checks no token (a payment
// API): Journal.Do gives fn a ctx carrying the operation's idempotency
// key, and Transport sends it in the Idempotency-Key header, quoted as the
// IETF draft asks. A retry of the operation sends the same key; once its
// outcome is recorded, Do does not call fn again.
func ExampleTransport_idempotencyKey() {
	payments := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println(httpfence.HeaderIdempotencyKey+":", r.Header.Get(httpfence.HeaderIdempotencyKey))
	}))
	defer payments.Close()
	client := &http.Client{Transport: &httpfence.Transport{Base: payments.Client().Transport}}

	ctx := context.Background()
	held, err := locktest.NewMemory().Locker("orders/42").Lock(ctx) // or any lock.Locker
	if err != nil {
		log.Fatal(err)
	}
	defer held.Unlock(ctx)
	j := intent.New(intent.NewMemory()) // in production, a store the holders share (etcd, PostgreSQL)

	charge := func(ctx context.Context, key string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, payments.URL+"/charges", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err // the charge may have happened: the intent stays open
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("charge: %s", resp.Status)
		}
		return nil
	}
	fmt.Println(j.Do(ctx, held, "charge/order-42", charge))
	fmt.Println(j.Do(ctx, held, "charge/order-42", charge)) // done: not sent again
	// Output:
	// Idempotency-Key: "charge-order-42.1.wfxJZMdGYyUlCxGwQgL1u-"
	// <nil>
	// <nil>
}
