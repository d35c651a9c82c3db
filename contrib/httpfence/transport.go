package httpfence

import (
	"net/http"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/intent/idempotency"
)

// Transport is an http.RoundTripper that sends what each request's context
// carries for the resource:
//
//   - the fencing token (fence.NewContext), in the Header header,
//     replacing any value the request has there;
//   - the idempotency key (idempotency.NewContext; intent.Journal.Do's fn gets a
//     ctx with its key), in the HeaderIdempotencyKey header, quoted as a
//     structured-field string (see HeaderIdempotencyKey), unless the
//     request already has that header: the caller's own key is kept, and
//     none is added.
//
// Each is sent without the other: a request whose context carries a key
// and no token is sent with the key alone (for a resource that checks no
// token, such as a payment API; Middleware would answer it 428). A request
// whose context carries neither is sent unchanged.
//
// A context carrying a token with Seq 0 or an empty name fails the request
// with an error matching fence.ErrNoToken or fence.ErrInvalidToken; one
// carrying a key with a byte outside printable ASCII fails it with an error
// matching ErrInvalidKey. Such a request is not sent, and its body is
// closed.
//
// Transport does not modify the caller's request (it sends a clone). It is
// safe for concurrent use if Base is.
type Transport struct {
	// Base sends the requests. Optional, defaults to http.DefaultTransport.
	Base http.RoundTripper
}

var _ http.RoundTripper = (*Transport)(nil)

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	tok, hasTok := fence.FromContext(req.Context())
	key, hasKey := idempotency.FromContext(req.Context())
	hasKey = hasKey && len(req.Header.Values(HeaderIdempotencyKey)) == 0
	if !hasTok && !hasKey {
		return base.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	if hasTok {
		if err := SetHeader(r.Header, tok); err != nil {
			return nil, abort(req, err)
		}
	}
	if hasKey {
		if err := SetIdempotencyKey(r.Header, key); err != nil {
			return nil, abort(req, err)
		}
	}
	return base.RoundTrip(r)
}

// abort closes req's body, as RoundTrip must even on errors, and returns
// err.
func abort(req *http.Request, err error) error {
	if req.Body != nil {
		_ = req.Body.Close()
	}
	return err
}
