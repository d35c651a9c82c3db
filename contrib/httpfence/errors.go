package httpfence

import "errors"

// ErrMissingToken is returned by FromHeader when the request has no
// fencing-token header. Middleware answers it with 428 Precondition Required.
var ErrMissingToken = errors.New("httpfence: missing " + Header + " header")
