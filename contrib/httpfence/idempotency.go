package httpfence

import (
	"fmt"
	"net/http"
	"strings"
)

// HeaderIdempotencyKey is the HTTP request header that carries an
// operation's idempotency key (the IETF httpapi draft "The Idempotency-Key
// HTTP Header Field", draft-ietf-httpapi-idempotency-key-header). The
// draft makes it an Item Structured Field whose value is a String
// (sf-string, RFC 8941 section 3.3.3): the key goes on the
// wire in double quotes, with any '"' or '\' in it escaped by a '\'. The
// key 8e03978e-40d5-43e8-bc93-6894a57f9324 is sent as
//
//	Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"
//
// and a server reads the key back by removing the quotes and the escapes
// (intent.Key makes keys that need no escapes). The draft allows one
// Idempotency-Key field per request.
const HeaderIdempotencyKey = "Idempotency-Key"

// SetIdempotencyKey sets h's HeaderIdempotencyKey header to key, written as
// a structured-field string (quoted; see HeaderIdempotencyKey). It returns
// an error matching ErrInvalidKey, and leaves h alone, if key is empty or
// has a byte outside printable ASCII (0x20 to 0x7E), which a
// structured-field string cannot hold.
func SetIdempotencyKey(h http.Header, key string) error {
	v, err := sfString(key)
	if err != nil {
		return err
	}
	h.Set(HeaderIdempotencyKey, v)
	return nil
}

// sfString returns key serialized as an RFC 8941 sf-string: in double
// quotes, with '"' and '\' escaped.
func sfString(key string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	var b strings.Builder
	b.Grow(len(key) + 2)
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("%w: byte %#04x at %d is not printable ASCII", ErrInvalidKey, c, i)
		case c == '"' || c == '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String(), nil
}
