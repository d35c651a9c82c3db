package grpcfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/telemetry"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/intent/idempotency"
)

// UnaryClientInterceptor returns a client interceptor that sends what the
// call's context carries for the resource:
//
//   - the fencing token (fence.NewContext), in the MetadataKey metadata,
//     replacing any value the caller put there;
//   - the idempotency key (idempotency.NewContext; intent.Journal.Do's fn gets a
//     ctx with its key), in the MetadataIdempotencyKey metadata, unless the
//     caller's outgoing metadata has that key already: the caller's own
//     value is kept, and none is added.
//
// Each is sent without the other: a call whose context carries a key and
// no token is sent with the key alone (for a service that checks no token;
// the server interceptors would answer it InvalidArgument). A call whose
// context carries neither is sent unchanged.
//
// A token with Seq 0 or an empty name fails the call, unsent, with an error
// matching fence.ErrNoToken or fence.ErrInvalidToken; a key with a byte
// outside printable ASCII, with an error matching ErrInvalidKey. A
// stale-token status comes back as a *StaleError.
func UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		ctx, err := outgoing(ctx)
		if err != nil {
			return err
		}
		return fromStatus(invoker(ctx, method, req, reply, cc, opts...))
	}
}

// StreamClientInterceptor is UnaryClientInterceptor for streams. A
// stale-token status comes back as a *StaleError from the stream's RecvMsg.
func StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		ctx, err := outgoing(ctx)
		if err != nil {
			return nil, err
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, fromStatus(err)
		}
		return clientStream{cs}, nil
	}
}

// outgoing returns ctx with the token and the idempotency key it carries,
// if any, in its outgoing metadata.
func outgoing(ctx context.Context) (context.Context, error) {
	if t, ok := fence.FromContext(ctx); ok {
		var err error
		if ctx, err = OutgoingContext(ctx, t); err != nil {
			return ctx, err
		}
	}
	if key, ok := idempotency.FromContext(ctx); ok {
		return withKey(ctx, key)
	}
	return ctx, nil
}

type clientStream struct{ grpc.ClientStream }

func (s clientStream) RecvMsg(m any) error { return fromStatus(s.ClientStream.RecvMsg(m)) }

// UnaryServerInterceptor returns a server interceptor that admits each
// call's token through g before calling the handler, with the admitted token
// in the handler's context (fence.FromContext). It answers, without calling
// the handler, FailedPrecondition for a stale token (with an ErrorInfo
// detail naming both numbers), InvalidArgument for missing, repeated or
// malformed metadata or a token with Seq 0 or an empty name, and
// Unavailable when g fails otherwise (the guard's own error is not sent).
func UnaryServerInterceptor(g fence.Guard, opts ...Option) grpc.UnaryServerInterceptor {
	tel := telemetry.FenceOf("grpc", opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := admit(ctx, g, tel)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streams: the token
// is admitted once, when the stream starts.
func StreamServerInterceptor(g fence.Guard, opts ...Option) grpc.StreamServerInterceptor {
	tel := telemetry.FenceOf("grpc", opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, err := admit(ss.Context(), g, tel)
		if err != nil {
			return err
		}
		return handler(srv, serverStream{ServerStream: ss, ctx: ctx})
	}
}

type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s serverStream) Context() context.Context { return s.ctx }

func admit(ctx context.Context, g fence.Guard, tel *telemetry.Fence) (context.Context, error) {
	t, err := FromIncomingContext(ctx)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := tel.Write(ctx, t, func(ctx context.Context) error { return g.Admit(ctx, t) }); err != nil {
		var stale *fence.StaleTokenError
		switch {
		case errors.As(err, &stale):
			return nil, staleStatus(stale).Err()
		case errors.Is(err, fence.ErrStaleToken):
			return nil, status.Error(codes.FailedPrecondition, fmt.Sprintf("grpcfence: token %s is stale: %v", t, err))
		case errors.Is(err, fence.ErrNoToken), errors.Is(err, fence.ErrInvalidToken):
			return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("grpcfence: token %s rejected: %v", t, err))
		case ctx.Err() != nil:
			return nil, status.FromContextError(ctx.Err()).Err()
		default:
			// The guard's own error may describe its backend: do not send it.
			return nil, status.Error(codes.Unavailable, fmt.Sprintf("grpcfence: token %s could not be checked; retry later", t))
		}
	}
	return fence.NewContext(ctx, t), nil
}
