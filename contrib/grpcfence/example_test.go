package grpcfence_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/dlock-go/dlock/contrib/grpcfence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/intent"
	"github.com/dlock-go/dlock/lock/locktest"
)

// A server fenced by a guard, and a client that sends the token from each
// call's context. The holder of token 41 is turned away once token 42 has
// been admitted.
func Example() {
	guard := fence.NewMemoryGuard() // or pgfence, redisfence
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(grpcfence.UnaryServerInterceptor(guard)),
		grpc.StreamInterceptor(grpcfence.StreamServerInterceptor(guard)),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcfence.UnaryClientInterceptor()),
		grpc.WithStreamInterceptor(grpcfence.StreamClientInterceptor()),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	for _, seq := range []uint64{41, 42, 41} {
		ctx := fence.NewContext(context.Background(), fence.Token{Name: "accounts/7", Seq: seq})
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		switch {
		case errors.Is(err, fence.ErrStaleToken):
			fmt.Println(seq, status.Code(err), status.Convert(err).Message())
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Println(seq, "admitted")
		}
	}
	// Output:
	// 41 admitted
	// 42 admitted
	// 41 FailedPrecondition fence: stale token for "accounts/7": seq 41 is below the highest admitted seq 42
}

// With an intent journal, at a service that checks no token: Journal.Do
// gives fn a ctx carrying the operation's idempotency key, and the client
// interceptor sends it in the idempotency-key metadata. Once the outcome
// is recorded, Do does not call fn again.
func Example_idempotencyKey() {
	// The service reads the key from its incoming metadata to deduplicate.
	srv := grpc.NewServer(grpc.UnaryInterceptor(
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			fmt.Println(grpcfence.MetadataIdempotencyKey+":", metadata.ValueFromIncomingContext(ctx, grpcfence.MetadataIdempotencyKey))
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcfence.UnaryClientInterceptor()),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	ctx := context.Background()
	held, err := locktest.NewMemory().Locker("orders/42").Lock(ctx) // or any lock.Locker
	if err != nil {
		log.Fatal(err)
	}
	defer held.Unlock(ctx)
	j := intent.New(intent.NewMemory()) // in production, a store the holders share (etcd, PostgreSQL)

	call := func(ctx context.Context, key string) error {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		return err // an error leaves the intent open: a retry sends the same key
	}
	fmt.Println(j.Do(ctx, held, "charge/order-42", call))
	fmt.Println(j.Do(ctx, held, "charge/order-42", call)) // done: not sent again
	// Output:
	// idempotency-key: [charge-order-42.1.wfxJZMdGYyUlCxGwQgL1u-]
	// <nil>
	// <nil>
}
