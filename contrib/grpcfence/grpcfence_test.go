package grpcfence_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/dlock-go/dlock/contrib/grpcfence"
	"github.com/dlock-go/dlock/fence"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// recorder sits behind the fence interceptors and records the token each
// handler finds in its context, and the call's idempotency-key metadata.
type recorder struct {
	mu     sync.Mutex
	tokens []fence.Token
	keys   [][]string
}

func (r *recorder) record(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tok, _ := fence.FromContext(ctx)
	r.tokens = append(r.tokens, tok)
	r.keys = append(r.keys, metadata.ValueFromIncomingContext(ctx, grpcfence.MetadataIdempotencyKey))
}

// seenKeys returns the idempotency-key values of each call, in order.
func (r *recorder) seenKeys() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]string(nil), r.keys...)
}

func (r *recorder) seen() []fence.Token {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]fence.Token(nil), r.tokens...)
}

// startServer runs a real gRPC server with the health service on a loopback
// port, fenced by g (not fenced if g is nil), and returns a fenced client
// for it.
func startServer(t *testing.T, g fence.Guard) (healthpb.HealthClient, *recorder) {
	t.Helper()
	rec := &recorder{}
	unary := []grpc.UnaryServerInterceptor{
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			rec.record(ctx)
			return h(ctx, req)
		},
	}
	stream := []grpc.StreamServerInterceptor{
		func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			rec.record(ss.Context())
			return h(srv, ss)
		},
	}
	if g != nil {
		unary = append([]grpc.UnaryServerInterceptor{grpcfence.UnaryServerInterceptor(g)}, unary...)
		stream = append([]grpc.StreamServerInterceptor{grpcfence.StreamServerInterceptor(g)}, stream...)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	hs := health.NewServer()
	hs.SetServingStatus("orders", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		hs.Shutdown()
		srv.Stop()
		assert.NoError(t, <-served)
	})

	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcfence.UnaryClientInterceptor()),
		grpc.WithStreamInterceptor(grpcfence.StreamClientInterceptor()),
	)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, conn.Close()) })
	return healthpb.NewHealthClient(conn), rec
}

func check(ctx context.Context, c healthpb.HealthClient) error {
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "orders"})
	return err
}

// watch opens a server stream and returns the first message's error.
func watch(ctx context.Context, c healthpb.HealthClient) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.Watch(ctx, &healthpb.HealthCheckRequest{Service: "orders"})
	if err != nil {
		return err
	}
	resp, err := stream.Recv()
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return status.Errorf(codes.Internal, "unexpected status %v", resp.GetStatus())
	}
	return nil
}

var calls = map[string]func(context.Context, healthpb.HealthClient) error{
	"unary":  check,
	"stream": watch,
}

func TestAdmittedTokenReachesHandler(t *testing.T) {
	for kind, call := range calls {
		t.Run(kind, func(t *testing.T) {
			c, rec := startServer(t, fence.NewMemoryGuard())
			tok := fence.Token{Name: "orders/eu", Seq: 42}
			require.NoError(t, call(fence.NewContext(testCtx(t), tok), c))
			assert.Equal(t, []fence.Token{tok}, rec.seen())
		})
	}
}

// The seed's timeline over gRPC: A (N) and B (N+1) are admitted; A's late
// call with N is answered FailedPrecondition naming both numbers, and on the
// client it matches fence.ErrStaleToken.
func TestStaleTokenIsFailedPrecondition(t *testing.T) {
	for kind, call := range calls {
		t.Run(kind, func(t *testing.T) {
			ctx := testCtx(t)
			g := fence.NewMemoryGuard()
			c, rec := startServer(t, g)
			a := fence.Token{Name: "accounts/7", Seq: 41}
			b := fence.Token{Name: "accounts/7", Seq: 42}
			require.NoError(t, call(fence.NewContext(ctx, a), c))
			require.NoError(t, call(fence.NewContext(ctx, b), c))

			err := call(fence.NewContext(ctx, a), c)
			assert.Equal(t, codes.FailedPrecondition, status.Code(err))
			assert.Contains(t, status.Convert(err).Message(), "seq 41 is below the highest admitted seq 42")
			assert.ErrorIs(t, err, fence.ErrStaleToken)
			var stale *fence.StaleTokenError
			require.ErrorAs(t, err, &stale)
			assert.Equal(t, fence.StaleTokenError{Name: "accounts/7", Seq: 41, Highest: 42}, *stale)
			var se *grpcfence.StaleError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, codes.FailedPrecondition, se.GRPCStatus().Code())

			assert.Equal(t, []fence.Token{a, b}, rec.seen(), "the stale call never reached the handler")
		})
	}
}

func TestMissingOrMalformedTokenIsInvalidArgument(t *testing.T) {
	for kind, call := range calls {
		t.Run(kind, func(t *testing.T) {
			ctx := testCtx(t)
			c, rec := startServer(t, fence.NewMemoryGuard())

			err := call(ctx, c) // no token in the context: nothing sent
			assert.Equal(t, codes.InvalidArgument, status.Code(err))
			assert.Contains(t, status.Convert(err).Message(), "missing dlock-fence-token metadata")

			for _, bad := range []struct {
				values []string
				want   string
			}{
				{[]string{"orders"}, "invalid token"},
				{[]string{"orders:x"}, "invalid token"},
				{[]string{"orders:01"}, "invalid token"},
				{[]string{"orders:0"}, "no token (seq 0)"},
				{[]string{":3"}, "empty name"},
				{[]string{"a:1", "a:2"}, "2 dlock-fence-token values"},
			} {
				md := metadata.MD{}
				md.Append(grpcfence.MetadataKey, bad.values...)
				err := call(metadata.NewOutgoingContext(ctx, md), c)
				assert.Equal(t, codes.InvalidArgument, status.Code(err), "%q", bad.values)
				assert.Contains(t, status.Convert(err).Message(), bad.want, "%q", bad.values)
			}
			assert.Empty(t, rec.seen())
		})
	}
}

func TestClientRejectsInvalidTokenWithoutSending(t *testing.T) {
	for kind, call := range calls {
		t.Run(kind, func(t *testing.T) {
			ctx := testCtx(t)
			c, rec := startServer(t, fence.NewMemoryGuard())
			assert.ErrorIs(t, call(fence.NewContext(ctx, fence.Token{Name: "orders"}), c), fence.ErrNoToken)
			assert.ErrorIs(t, call(fence.NewContext(ctx, fence.Token{Seq: 5}), c), fence.ErrInvalidToken)
			assert.Empty(t, rec.seen())
		})
	}
}

func TestContextTokenReplacesMetadata(t *testing.T) {
	ctx := testCtx(t)
	c, rec := startServer(t, fence.NewMemoryGuard())
	ctx = metadata.AppendToOutgoingContext(ctx, grpcfence.MetadataKey, "stale:1", "other", "kept")
	tok := fence.Token{Name: "jobs/nightly", Seq: 9}
	require.NoError(t, check(fence.NewContext(ctx, tok), c))
	assert.Equal(t, []fence.Token{tok}, rec.seen())

	md, _ := metadata.FromOutgoingContext(ctx)
	assert.Equal(t, []string{"stale:1"}, md.Get(grpcfence.MetadataKey), "the caller's metadata is unchanged")
}

func TestGuardFailureIsUnavailable(t *testing.T) {
	// A guard whose backend is unreachable, failing as redisfence does
	// when nothing listens on its address.
	g := failingGuard{errors.New("redisfence: admit: dial tcp 127.0.0.1:1: connect: connection refused")}
	for kind, call := range calls {
		t.Run(kind, func(t *testing.T) {
			c, rec := startServer(t, g)
			err := call(fence.NewContext(testCtx(t), fence.Token{Name: "orders", Seq: 1}), c)
			assert.Equal(t, codes.Unavailable, status.Code(err))
			assert.Contains(t, status.Convert(err).Message(), "orders:1 could not be checked")
			assert.NotContains(t, status.Convert(err).Message(), "127.0.0.1:1")
			assert.Empty(t, rec.seen())
		})
	}
}

func TestFromIncomingContext(t *testing.T) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(grpcfence.MetadataKey, "a%3Ab:7"))
	tok, err := grpcfence.FromIncomingContext(ctx)
	require.NoError(t, err)
	assert.Equal(t, fence.Token{Name: "a:b", Seq: 7}, tok)
	_, err = grpcfence.FromIncomingContext(context.Background())
	assert.ErrorIs(t, err, grpcfence.ErrMissingToken)
	_, err = grpcfence.OutgoingContext(context.Background(), fence.Token{Name: "a"})
	assert.ErrorIs(t, err, fence.ErrNoToken)
}

// failingGuard is a guard whose every check fails with err, as one whose
// backend cannot be reached.
type failingGuard struct{ err error }

func (g failingGuard) Admit(context.Context, fence.Token) error { return g.err }
