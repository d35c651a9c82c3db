package main

// The register service (-guard grpc): the fenced register over gRPC,
// behind contrib/grpcfence's server interceptors (a fence.MemoryGuard).
// The service is written by hand (no protoc): requests are
// wrapperspb.StringValue, "L" for Read and "L=V" for Write, replies
// wrapperspb.Int64Value (the register's value). As /guarded does, the
// handler checks the token from the context again under the registers'
// lock, atomically with the write; its refusal is the same status the
// interceptors send (FailedPrecondition with grpcfence's ErrorInfo), so
// that the client's interceptors turn it into fence.ErrStaleToken.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dlock-go/dlock/contrib/grpcfence"
	"github.com/dlock-go/dlock/fence"
)

// RegisterService is the service's name.
const RegisterService = "dlock.cluster.Register"

// registerDesc describes the service to grpc.Server.RegisterService.
func (r *resource) registerDesc() *grpc.ServiceDesc {
	method := func(name string, write bool) grpc.MethodDesc {
		return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return r.grpcOp(ctx, req.(*wrapperspb.StringValue).GetValue(), write)
			}
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + RegisterService + "/" + name}, h)
		}}
	}
	return &grpc.ServiceDesc{
		ServiceName: RegisterService,
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{method("Read", false), method("Write", true)},
	}
}

// grpcServer is the register service behind grpcfence's interceptors.
func (r *resource) grpcServer(g fence.Guard) *grpc.Server {
	r.guard = g
	srv := grpc.NewServer(grpc.UnaryInterceptor(grpcfence.UnaryServerInterceptor(g)))
	srv.RegisterService(r.registerDesc(), r)
	return srv
}

func (r *resource) grpcOp(ctx context.Context, arg string, write bool) (*wrapperspb.Int64Value, error) {
	tok, ok := fence.FromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Internal, "no token in the call's context")
	}
	name := arg
	var v int64
	if write {
		n, val, ok := strings.Cut(arg, "=")
		x, err := strconv.ParseInt(val, 10, 64)
		if !ok || err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "want L=V, got %q", arg)
		}
		name, v = n, x
	}
	if name != tok.Name {
		return nil, status.Errorf(codes.InvalidArgument, "lock %q, token of %q", name, tok.Name)
	}
	value, mark, err := r.guardedOp(ctx, name, tok.Seq, write, v)
	switch {
	case errors.Is(err, errStale):
		return nil, staleStatus(&fence.StaleTokenError{Name: tok.Name, Seq: tok.Seq, Highest: mark}).Err()
	case err != nil:
		return nil, status.Error(codes.Internal, err.Error())
	}
	return wrapperspb.Int64(value), nil
}

// staleStatus is grpcfence's stale-token status (it does not export its
// own): FailedPrecondition with an ErrorInfo detail.
func staleStatus(e *fence.StaleTokenError) *status.Status {
	st := status.New(codes.FailedPrecondition, e.Error())
	d, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason: grpcfence.ReasonStaleToken, Domain: grpcfence.ErrorDomain,
		Metadata: map[string]string{"name": e.Name, "seq": strconv.FormatUint(e.Seq, 10), "highest": strconv.FormatUint(e.Highest, 10)},
	})
	if err != nil {
		panic(fmt.Sprintf("grpc status details: %v", err))
	}
	return d
}
