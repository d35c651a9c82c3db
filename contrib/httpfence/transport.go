package httpfence

import (
	"net/http"

	"github.com/dlock-go/dlock/fence"
)

// Transport is an http.RoundTripper that sends the fencing token carried by
// each request's context (fence.NewContext) in the Header header. A request
// whose context carries no token is sent unchanged; one whose context
// carries a token with Seq 0 or an empty name fails with an error matching
// fence.ErrNoToken or fence.ErrInvalidToken, and is not sent.
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
	tok, ok := fence.FromContext(req.Context())
	if !ok {
		return base.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	if err := SetHeader(r.Header, tok); err != nil {
		if req.Body != nil {
			_ = req.Body.Close() // RoundTrip must close the body, even on errors
		}
		return nil, err
	}
	return base.RoundTrip(r)
}
