package intenttest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// HTTPCall starts an HTTP server on loopback for tb (closed with
// tb.Cleanup) and returns a call of it: a POST with the key as
// Idempotency-Key. It is the bare call that the stores' benchmarks
// (BenchmarkDo) compare Journal.Do with.
func HTTPCall(tb testing.TB) func(ctx context.Context, key string) error {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	tb.Cleanup(srv.Close)
	return func(ctx context.Context, key string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
}
