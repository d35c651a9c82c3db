package lock_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/lock"
)

// enqueueFault fails the first enqueuing Txn (one with a put) after it is
// armed with err. With hold, the request is not sent: apply sends it later,
// as a member that was paused with the request in hand would forward it
// after the client gave up. Without hold, it is applied first, as when
// only the response is lost.
type enqueueFault struct {
	hold bool
	err  error

	mu      sync.Mutex
	armed   bool
	pending func(context.Context) error
}

func (f *enqueueFault) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	f.mu.Lock()
	tr, ok := req.(*pb.TxnRequest)
	hit := ok && f.armed && hasPut(tr)
	if hit {
		f.armed = false
		if f.hold {
			f.pending = func(ctx context.Context) error { return invoker(ctx, method, req, reply, cc, opts...) }
			f.mu.Unlock()
			return f.err
		}
	}
	f.mu.Unlock()
	if err := invoker(ctx, method, req, reply, cc, opts...); err != nil || !hit {
		return err
	}
	return f.err
}

func (f *enqueueFault) arm() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed = true
}

func hasPut(tr *pb.TxnRequest) bool {
	for _, op := range append(tr.Success, tr.Failure...) {
		if op.GetRequestPut() != nil {
			return true
		}
	}
	return false
}

// apply sends the held-back request.
func (f *enqueueFault) apply(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	send := f.pending
	f.mu.Unlock()
	require.NotNil(t, send, "no request was held back")
	require.NoError(t, send(etcdtest.Context(t)))
}

// faultyMutex returns a Mutex called name on a session whose client goes
// through f.
func faultyMutex(t *testing.T, c *etcdtest.Cluster, f *enqueueFault, name string) (*clientv3.Client, *lock.Mutex) {
	t.Helper()
	cfg := c.Config()
	cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(f.intercept)}
	cli := etcdtest.NewClient(t, cfg)
	return cli, newMutex(t, etcdtest.Session(t, cli), name)
}

// acquirers are Lock and TryLock, by name.
var acquirers = map[string]func(*lock.Mutex) func(context.Context) (lock.Held, error){
	"Lock":    func(m *lock.Mutex) func(context.Context) (lock.Held, error) { return m.Lock },
	"TryLock": func(m *lock.Mutex) func(context.Context) (lock.Held, error) { return m.TryLock },
}

// An acquire whose enqueuing write failed with an unknown outcome (a
// timeout) may still be applied later: a member paused with the request in
// hand forwards it when it resumes. That late write must not leave a key
// behind: bound to the still-live session, it would sit in the queue and
// block every other client until the session ends. Found by the container
// scenario (a paused then resumed member stalled all workers). The acquire
// sends its enqueue again, under a fresh name, and is granted; the late
// copy, arriving after that grant's release, is void.
func TestLateEnqueueLeavesNoKey(t *testing.T) {
	t.Parallel()
	for name, acquirer := range acquirers {
		t.Run(name, func(t *testing.T) {
			c := etcdtest.New(t)
			f := &enqueueFault{hold: true, err: rpctypes.ErrGRPCTimeout} // "request timed out": outcome unknown
			cli, m := faultyMutex(t, c, f, "late")
			ctx := etcdtest.Context(t)

			f.arm()
			acquire := acquirer(m)
			h, err := acquire(ctx)
			require.NoError(t, err, "the enqueue is sent again after the held-back one")
			require.NoError(t, h.Unlock(ctx))
			f.apply(t) // the held-back write arrives after the grant's release

			assert.Zero(t, etcdtest.KeyCount(t, cli, m.Prefix()), "the late write left a key in the queue")
			other := newMutex(t, etcdtest.Session(t, c.Client(t)), "late")
			h, err = other.TryLock(ctx)
			require.NoError(t, err, "another session must find the lock free")
			require.NoError(t, h.Unlock(ctx))

			// The session still works: its next acquire is granted.
			h, err = m.Lock(ctx)
			require.NoError(t, err)
			require.NoError(t, h.Unlock(ctx))
			assert.Zero(t, etcdtest.KeyCount(t, cli, m.Prefix()))
		})
	}
}

// An enqueue applied whose response is lost: with "request timed out" the
// acquire deletes the key and sends its enqueue again under a fresh name;
// with DeadlineExceeded while the caller's context lives, etcd's client
// itself sends the Txn again, which finds the session's own key under the
// name. Either way the grant's key is the only one.
func TestLostEnqueueResponseLeavesNoKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"request timed out", rpctypes.ErrGRPCTimeout},
		{"retried by the client", status.Error(codes.DeadlineExceeded, "response lost")},
	} {
		for name, acquirer := range acquirers {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				c := etcdtest.New(t)
				f := &enqueueFault{armed: true, err: tc.err}
				cli, m := faultyMutex(t, c, f, "lost")
				ctx := etcdtest.Context(t)
				acquire := acquirer(m)
				h, err := acquire(ctx)
				require.NoError(t, err)
				assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, m.Prefix()), "only the grant's own key")
				require.NoError(t, h.Unlock(ctx))
				assert.Zero(t, etcdtest.KeyCount(t, cli, m.Prefix()))
			})
		}
	}
}
