package httpfence

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/telemetry"
)

// Middleware returns middleware that admits each request's fencing token
// through g before calling the next handler, with the admitted token in the
// request's context (fence.FromContext). It answers, without calling next:
// 428 when the header is missing, 400 when it is malformed or repeated or
// carries Seq 0 or an empty name, 409 when g rejects the token as stale
// (the body names the token's Seq and the highest admitted Seq), and 503
// when g fails otherwise. The body is plain text and says why.
//
// Admission is not atomic with what next does; see the package
// documentation.
func Middleware(g fence.Guard, opts ...Option) func(http.Handler) http.Handler {
	tel := telemetry.FenceOf("http", opts)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tok, err := FromHeader(r.Header)
			if errors.Is(err, ErrMissingToken) {
				http.Error(w, err.Error()+": this resource requires a fencing token", http.StatusPreconditionRequired)
				return
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if err := tel.Write(r.Context(), tok, func(ctx context.Context) error { return g.Admit(ctx, tok) }); err != nil {
				code, msg := rejection(tok, err)
				http.Error(w, msg, code)
				return
			}
			next.ServeHTTP(w, r.WithContext(fence.NewContext(r.Context(), tok)))
		})
	}
}

func rejection(tok fence.Token, err error) (int, string) {
	var stale *fence.StaleTokenError
	switch {
	case errors.As(err, &stale):
		return http.StatusConflict, stale.Error()
	case errors.Is(err, fence.ErrStaleToken):
		return http.StatusConflict, fmt.Sprintf("httpfence: token %s is stale: %v", tok, err)
	case errors.Is(err, fence.ErrNoToken), errors.Is(err, fence.ErrInvalidToken):
		return http.StatusBadRequest, fmt.Sprintf("httpfence: token %s rejected: %v", tok, err)
	default:
		// The guard's own error may describe its backend: do not send it.
		return http.StatusServiceUnavailable, fmt.Sprintf("httpfence: token %s could not be checked; retry later", tok)
	}
}
