package httpfence

import (
	"fmt"
	"net/http"

	"github.com/dlock-go/dlock/fence"
)

// Header is the HTTP header that carries a fencing token, in the wire form
// of fence.Token.String.
const Header = "Dlock-Fence-Token"

// SetHeader sets h's fencing-token header to t. It returns an error matching
// fence.ErrNoToken or fence.ErrInvalidToken, and leaves h alone, if t cannot
// be presented to a guard.
func SetHeader(h http.Header, t fence.Token) error {
	if err := t.Check(); err != nil {
		return fmt.Errorf("httpfence: %w", err)
	}
	h.Set(Header, t.String())
	return nil
}

// FromHeader returns the token in h. It returns ErrMissingToken if there is
// none, and an error matching fence.ErrInvalidToken if the header is
// repeated or malformed or the name is empty, or fence.ErrNoToken if Seq is 0.
func FromHeader(h http.Header) (fence.Token, error) {
	vals := h.Values(Header)
	switch len(vals) {
	case 0:
		return fence.Token{}, ErrMissingToken
	case 1:
	default:
		return fence.Token{}, fmt.Errorf("httpfence: %w: %d %s headers, want one", fence.ErrInvalidToken, len(vals), Header)
	}
	t, err := fence.ParseToken(vals[0])
	if err == nil {
		err = t.Check()
	}
	if err != nil {
		return fence.Token{}, fmt.Errorf("httpfence: %s header: %w", Header, err)
	}
	return t, nil
}
