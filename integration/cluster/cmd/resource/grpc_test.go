package main

import (
	"errors"
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dlock-go/dlock/contrib/grpcfence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/cluster/history"
)

// The register service behind grpcfence: a stale token is refused by the
// guard (the interceptor's, which the handler asks again with the write),
// and the client sees fence.ErrStaleToken; behind the plant's guard, which
// admits everything, the stale write goes through (the control).
func TestRegisterService(t *testing.T) {
	for _, c := range []struct {
		name  string
		guard fence.Guard
	}{{"interceptor", fence.NewMemoryGuard()}, {"admit-all", admitAll{}}} {
		t.Run(c.name, func(t *testing.T) {
			lw, err := history.Create(filepath.Join(t.TempDir(), "resource.jsonl"))
			require.NoError(t, err)
			r := newResource(lw, nil, false)
			srv := r.grpcServer(c.guard)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			served := make(chan error, 1)
			go func() { served <- srv.Serve(ln) }()
			conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithUnaryInterceptor(grpcfence.UnaryClientInterceptor()))
			require.NoError(t, err)
			defer func() {
				conn.Close()
				srv.Stop()
				assert.NoError(t, <-served)
				assert.NoError(t, lw.Close())
			}()
			call := func(method string, tok uint64, arg string) (int64, error) {
				ctx := fence.NewContext(t.Context(), fence.Token{Name: "L", Seq: tok})
				out := new(wrapperspb.Int64Value)
				err := conn.Invoke(ctx, "/"+RegisterService+"/"+method, wrapperspb.String(arg), out)
				return out.GetValue(), err
			}
			_, err = call("Write", 5, "L=1")
			require.NoError(t, err)
			v, err := call("Read", 5, "L")
			require.NoError(t, err)
			assert.Equal(t, int64(1), v)
			_, err = call("Write", 4, "L=2")
			if c.name == "admit-all" {
				assert.NoError(t, err, "the plant admits the stale write")
				return
			}
			var stale *fence.StaleTokenError
			require.True(t, errors.As(err, &stale), "%v", err)
			assert.Equal(t, uint64(5), stale.Highest)
			_, err = call("Write", 5, "M=2")
			assert.ErrorContains(t, err, `lock "M", token of "L"`)
		})
	}
}
