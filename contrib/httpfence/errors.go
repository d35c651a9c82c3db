package httpfence

import "errors"

// ErrMissingToken is returned by FromHeader when the request has no
// fencing-token header. Middleware answers it with 428 Precondition Required.
var ErrMissingToken = errors.New("httpfence: missing " + Header + " header")

// ErrInvalidKey is returned by SetIdempotencyKey, and by Transport (which
// then does not send the request), when an idempotency key is empty or has
// a byte outside printable ASCII: it cannot be sent as a structured-field
// string. intent.Key never makes such a key.
var ErrInvalidKey = errors.New("httpfence: invalid idempotency key")
