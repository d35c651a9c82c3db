package lock_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dlock-go/dlock/integration/etcdtest"
)

// delayedWrite holds back the first enqueuing Txn (one with a put) after
// it is armed: the caller gets DeadlineExceeded at once, and the request is
// sent later by apply, as a member that was paused with the request in hand
// would forward it after the client gave up.
type delayedWrite struct {
	mu      sync.Mutex
	armed   bool
	pending func(context.Context) error
}

func (d *delayedWrite) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	d.mu.Lock()
	if tr, ok := req.(*pb.TxnRequest); ok && d.armed && hasPut(tr) {
		d.armed = false
		d.pending = func(ctx context.Context) error { return invoker(ctx, method, req, reply, cc, opts...) }
		d.mu.Unlock()
		return rpctypes.ErrGRPCTimeout // "etcdserver: request timed out": outcome unknown
	}
	d.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
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
func (d *delayedWrite) apply(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	send := d.pending
	d.mu.Unlock()
	require.NotNil(t, send, "no request was held back")
	require.NoError(t, send(ctxFor(t)))
}

// An acquire whose enqueuing write failed with an unknown outcome (a
// timeout) may still be applied later: a member paused with the request in
// hand forwards it when it resumes. That late write must not leave a key
// behind: bound to the still-live session, it would sit in the queue and
// block every other client until the session ends. Found by the container
// scenario (a paused then resumed member stalled all workers).
func TestLateEnqueueLeavesNoKey(t *testing.T) {
	for _, try := range []bool{false, true} {
		name := map[bool]string{false: "Lock", true: "TryLock"}[try]
		t.Run(name, func(t *testing.T) {
			c := etcdtest.New(t)
			d := &delayedWrite{}
			cfg := c.Config()
			cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(d.intercept)}
			cli := etcdtest.NewClient(t, cfg)
			s := newSession(t, cli)
			m := newMutex(t, s, "late")
			ctx := ctxFor(t)

			d.mu.Lock()
			d.armed = true
			d.mu.Unlock()
			acquire := m.Lock
			if try {
				acquire = m.TryLock
			}
			_, err := acquire(ctx)
			require.Error(t, err, "the enqueuing write was held back")
			d.apply(t) // the write arrives after the acquire gave up

			assert.Zero(t, keyCount(t, cli, m.Prefix()), "the late write left a key in the queue")
			other := newMutex(t, newSession(t, c.Client(t)), "late")
			h, err := other.TryLock(ctx)
			require.NoError(t, err, "another session must find the lock free")
			require.NoError(t, h.Unlock(ctx))

			// The session still works: its next acquire is granted.
			h, err = m.Lock(ctx)
			require.NoError(t, err)
			require.NoError(t, h.Unlock(ctx))
			assert.Zero(t, keyCount(t, cli, m.Prefix()))
		})
	}
}

// appliedThenFailed applies the first enqueuing Txn after it is armed and
// then reports err to the caller, as when the response is lost.
type appliedThenFailed struct {
	mu    sync.Mutex
	armed bool
	err   error
}

func (a *appliedThenFailed) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	a.mu.Lock()
	hit := false
	if tr, ok := req.(*pb.TxnRequest); ok && a.armed && hasPut(tr) {
		a.armed, hit = false, true
	}
	a.mu.Unlock()
	if err := invoker(ctx, method, req, reply, cc, opts...); err != nil || !hit {
		return err
	}
	return a.err
}

// An enqueue applied whose response is lost: with "request timed out" the
// acquire fails and must delete the key; with DeadlineExceeded while the
// caller's context lives, etcd's client itself sends the Txn again, which
// finds the session's own key under the name and must not leave it behind.
func TestLostEnqueueResponseLeavesNoKey(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		granted bool
	}{
		{"request timed out", rpctypes.ErrGRPCTimeout, false},
		{"retried by the client", status.Error(codes.DeadlineExceeded, "response lost"), true},
	} {
		for _, try := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{false: "/Lock", true: "/TryLock"}[try], func(t *testing.T) {
				c := etcdtest.New(t)
				a := &appliedThenFailed{armed: true, err: tc.err}
				cfg := c.Config()
				cfg.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(a.intercept)}
				cli := etcdtest.NewClient(t, cfg)
				m := newMutex(t, newSession(t, cli), "lost")
				ctx := ctxFor(t)
				acquire := m.Lock
				if try {
					acquire = m.TryLock
				}
				h, err := acquire(ctx)
				if !tc.granted {
					require.Error(t, err)
					assert.Zero(t, keyCount(t, cli, m.Prefix()), "the applied enqueue was left behind")
					h, err = m.Lock(ctx)
				}
				require.NoError(t, err)
				assert.Equal(t, int64(1), keyCount(t, cli, m.Prefix()), "only the grant's own key")
				require.NoError(t, h.Unlock(ctx))
				assert.Zero(t, keyCount(t, cli, m.Prefix()))
			})
		}
	}
}
