// Package grpcfence carries fencing tokens over gRPC: client interceptors
// send the token from the call's context in the [MetadataKey] metadata, and
// server interceptors admit it through any [fence.Guard] before the handler
// runs, unary and streaming alike. The client interceptors also send the
// idempotency key that intent.Journal.Do puts in its fn's context, in the
// [MetadataIdempotencyKey] metadata, so that a service that cannot check a
// token can deduplicate the operation instead.
//
// # Guarantee
//
// A call reaches its handler only if its token was admitted by the guard;
// the handler finds that token in its context ([fence.FromContext]).
// Rejections carry a status code and a message that says why:
//
//   - FailedPrecondition: the token is stale; the message names both
//     numbers, and an ErrorInfo detail (reason [ReasonStaleToken], domain
//     [ErrorDomain]) carries them as "name", "seq" and "highest".
//   - InvalidArgument: the metadata is missing, repeated or malformed, or
//     carries Seq 0 or an empty name.
//   - Unavailable: the guard could not decide (its backend is down). Admit is
//     idempotent, so the call may be retried.
//
// On the client, the interceptors turn a stale-token status back into an
// error that matches fence.ErrStaleToken (errors.As gives the
// *fence.StaleTokenError) and still has its status (status.Code).
//
// # Limit
//
// Admission happens before the handler runs, not atomically with the
// handler's write: a higher token can be admitted between the two. The
// interceptors turn away holders that are already stale; to make the write
// itself safe, do it atomically with the check (pgfence.Guard.AdmitTx with
// the token from the context, or redisfence.Guard.Set). A stream is admitted
// once, when it starts: a stream that outlives its lock is not cut off.
//
// # Caveats
//
//   - The metadata value is fence.Token.String, for example
//     "dlock-fence-token: orders/eu:42".
//   - The client interceptors send nothing for a call whose context carries
//     no token (the server answers InvalidArgument); a context carrying a
//     token with Seq 0 or an empty name fails the call on the client without
//     sending it. A token in the context replaces any MetadataKey value the
//     caller put in the outgoing metadata itself.
//   - The idempotency-key metadata value is the key as is (no quotes, unlike
//     HTTP's Idempotency-Key header). The client interceptors send it with
//     or without a token, and never replace an idempotency-key value the
//     caller put in the outgoing metadata. The server interceptors do not
//     read it: deduplicating by key is the service's part.
//   - Anyone who can reach the server can present a high token and raise the
//     mark: fencing is a safety net against paused holders, not access
//     control.
package grpcfence
