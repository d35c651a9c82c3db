// Package idempotency carries an operation's idempotency key in a
// context.Context, with no dependency beyond the standard library, so that
// clients of resources (contrib/httpfence's Transport, contrib/grpcfence's
// interceptors) can send the key without importing a lock backend.
// Package intent's Journal.Do puts the key of the operation it runs in the
// ctx it gives fn; intent.NewContext and intent.KeyFromContext are these
// functions.
package idempotency

import "context"

type ctxKey struct{}

// NewContext returns a copy of ctx that carries key.
func NewContext(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, ctxKey{}, key)
}

// FromContext returns the key stored in ctx by NewContext, if any (an
// empty key counts as none).
func FromContext(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(ctxKey{}).(string)
	return k, ok && k != ""
}
