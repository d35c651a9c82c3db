// Package httpfence carries fencing tokens over HTTP: a client
// [Transport] sends the token from the request's context in the [Header]
// header, and server [Middleware] admits it through any [fence.Guard] before
// the handler runs. The Transport also sends the idempotency key that
// intent.Journal.Do puts in its fn's context, in the [HeaderIdempotencyKey]
// header, so that a resource that cannot check a token (a payment API) can
// deduplicate the operation instead.
//
// # Guarantee
//
// A request reaches the handler only if its token was admitted by the guard,
// and the handler finds that token in its request's context
// ([fence.FromContext]). Rejections are explicit, with a plain-text body that
// says why:
//
//   - 409 Conflict: the token is stale; the body names both numbers (the
//     token's Seq and the highest admitted one).
//   - 400 Bad Request: the header is malformed, repeated, has Seq 0 or an
//     empty name.
//   - 428 Precondition Required: the header is missing. The resource
//     requires a fencing token (RFC 6585: "the origin server requires the
//     request to be conditional", which exists to prevent lost updates).
//   - 503 Service Unavailable: the guard could not decide (its backend is
//     down). Admit is idempotent, so the request may be retried.
//
// # Limit
//
// Admission happens before the handler runs, not atomically with the
// handler's write: a higher token can be admitted between the two. The
// middleware alone turns away holders that are already stale; to make the
// write itself safe, do it atomically with the check, for example in a
// PostgreSQL transaction with pgfence.Guard.AdmitTx using the token from the
// context, or with redisfence.Guard.Set.
//
// # Caveats
//
//   - The header value is fence.Token.String (printable ASCII, no spaces or
//     colons in the name), for example "Dlock-Fence-Token: orders/eu:42".
//   - Transport sends no token header for a request whose context carries
//     no token; Middleware then answers 428. A context carrying an invalid
//     token (Seq 0, empty name) fails the request on the client.
//   - The Idempotency-Key value is a structured-field string, quoted as the
//     IETF draft requires: Idempotency-Key: "charge-order-42.7.<hash>".
//     Transport sends the key with or without a token, and never replaces
//     an Idempotency-Key header the request already has. Middleware does
//     not read the key: deduplicating by key is the resource's part.
//   - Anyone who can reach the server can present a high token and raise the
//     mark: fencing is a safety net against paused holders, not access
//     control. Authenticate clients separately.
package httpfence
