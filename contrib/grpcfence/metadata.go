package grpcfence

import (
	"context"
	"fmt"

	"google.golang.org/grpc/metadata"

	"github.com/dlock-go/dlock/fence"
)

// MetadataKey is the gRPC metadata key that carries a fencing token, in the
// wire form of fence.Token.String.
const MetadataKey = "dlock-fence-token"

// MetadataIdempotencyKey is the gRPC metadata key that carries an
// operation's idempotency key (intent.Journal.Do's key), the counterpart of
// HTTP's Idempotency-Key header. The value is the key itself, unquoted:
// gRPC metadata values are plain printable ASCII, not HTTP structured
// fields. A server reads it with
// metadata.ValueFromIncomingContext(ctx, MetadataIdempotencyKey).
const MetadataIdempotencyKey = "idempotency-key"

// OutgoingContext returns a copy of ctx whose outgoing metadata carries t
// under MetadataKey (replacing any value there). It returns an error
// matching fence.ErrNoToken or fence.ErrInvalidToken if t cannot be
// presented to a guard. The client interceptors call it with the token from
// fence.FromContext.
func OutgoingContext(ctx context.Context, t fence.Token) (context.Context, error) {
	if err := t.Check(); err != nil {
		return ctx, fmt.Errorf("grpcfence: %w", err)
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	md.Set(MetadataKey, t.String())
	return metadata.NewOutgoingContext(ctx, md), nil
}

// FromIncomingContext returns the token in ctx's incoming metadata. It
// returns ErrMissingToken if there is none, and an error matching
// fence.ErrInvalidToken if the value is repeated or malformed or the name is
// empty, or fence.ErrNoToken if Seq is 0.
func FromIncomingContext(ctx context.Context) (fence.Token, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(MetadataKey)
	switch len(vals) {
	case 0:
		return fence.Token{}, ErrMissingToken
	case 1:
	default:
		return fence.Token{}, fmt.Errorf("grpcfence: %w: %d %s values, want one", fence.ErrInvalidToken, len(vals), MetadataKey)
	}
	t, err := fence.ParseToken(vals[0])
	if err == nil {
		err = t.Check()
	}
	if err != nil {
		return fence.Token{}, fmt.Errorf("grpcfence: %s metadata: %w", MetadataKey, err)
	}
	return t, nil
}

// withKey returns ctx with key in its outgoing metadata under
// MetadataIdempotencyKey, unless the caller put a value there already: the
// caller's own is kept. It returns an error matching ErrInvalidKey if key
// has a byte outside printable ASCII, which metadata cannot carry.
func withKey(ctx context.Context, key string) (context.Context, error) {
	if len(metadata.ValueFromOutgoingContext(ctx, MetadataIdempotencyKey)) > 0 {
		return ctx, nil
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return ctx, fmt.Errorf("%w: byte %#04x at %d is not printable ASCII", ErrInvalidKey, c, i)
		}
	}
	return metadata.AppendToOutgoingContext(ctx, MetadataIdempotencyKey, key), nil
}
