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
	"google.golang.org/grpc/status"

	"github.com/dlock-go/dlock/contrib/grpcfence"
	"github.com/dlock-go/dlock/fence"
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
