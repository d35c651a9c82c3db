package lock_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

// rpcCounter counts a client's etcd calls by method, and the watches it
// creates (WatchCreateRequests sent on watch streams).
type rpcCounter struct {
	mu      sync.Mutex
	calls   map[string]int
	watches atomic.Int64
}

func (rc *rpcCounter) options() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			rc.add(method)
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			rc.add(method)
			s, err := streamer(ctx, desc, cc, method, opts...)
			return &countingStream{ClientStream: s, rc: rc}, err
		}),
	}
}

func (rc *rpcCounter) add(method string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.calls[method]++
}

func (rc *rpcCounter) get(method string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.calls[method]
}

type countingStream struct {
	grpc.ClientStream
	rc *rpcCounter
}

func (s *countingStream) SendMsg(m any) error {
	if w, ok := m.(*pb.WatchRequest); ok && w.GetCreateRequest() != nil {
		s.rc.watches.Add(1)
	}
	return s.ClientStream.SendMsg(m)
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// 10,000 locks held on one session, each with Done watched, cost no
// goroutine and no etcd watch each: the session checks their keys once per
// heartbeat, in its own loop. Heartbeats stay one per interval. A key
// deleted by someone else is still reported (within one interval), and
// only for that grant.
func TestManyWatchedGrants(t *testing.T) {
	// Not parallel: it measures the whole process's goroutines and heap.
	if testing.Short() {
		t.Skip("acquires 10,000 locks")
	}
	const locks, workers = 10000, 32
	const heartbeat = 500 * time.Millisecond
	c := etcdtest.New(t)
	rc := &rpcCounter{calls: map[string]int{}}
	cfg := c.Config()
	cfg.DialOptions = rc.options()
	cli := etcdtest.NewClient(t, cfg)
	s := etcdtest.Session(t, cli, session.WithTTL(5*time.Second), session.WithHeartbeat(heartbeat))
	ctx := etcdtest.ContextFor(t, 3*time.Minute)

	mutexes := make([]*lock.Mutex, locks)
	for i := range mutexes {
		mutexes[i] = newMutex(t, s, fmt.Sprintf("tenant/%d", i))
	}
	held := make([]lock.Held, locks)
	goroutines, heap := runtime.NumGoroutine(), heapInUse()
	watchesBefore := rc.watches.Load()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < locks; i = next.Add(1) - 1 {
				h, err := mutexes[i].Lock(ctx)
				if !assert.NoError(t, err) {
					return
				}
				h.Done()
				held[i] = h
			}
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	perLockG := float64(runtime.NumGoroutine()-goroutines) / locks
	perLockHeap := float64(heapInUse()-heap) / locks
	watches := rc.watches.Load() - watchesBefore
	t.Logf("%d held locks with Done watched: %.3f goroutines and %.0f B heap per lock, %d etcd watches", locks, perLockG, perLockHeap, watches)
	assert.LessOrEqual(t, perLockG, 0.05, "goroutines per watched grant")
	assert.LessOrEqual(t, perLockHeap, 8192.0, "heap per watched grant")
	assert.Zero(t, watches, "no etcd watch per grant")

	// Over a few heartbeat intervals: one keepalive and one key check each.
	const intervals = 4
	ka, ttl := rc.get("/etcdserverpb.Lease/LeaseKeepAlive"), rc.get("/etcdserverpb.Lease/LeaseTimeToLive")
	last := s.Deadline()
	for n := 0; n < intervals; {
		select {
		case <-ctx.Done():
			t.Fatal("the deadline stopped moving")
		case <-s.Done():
			t.Fatalf("session ended: %v", s.Err())
		case <-time.After(20 * time.Millisecond): // polling the deadline: no event exists for it
		}
		if d := s.Deadline(); d.After(last) {
			last, n = d, n+1
		}
	}
	kaN, ttlN := rc.get("/etcdserverpb.Lease/LeaseKeepAlive")-ka, rc.get("/etcdserverpb.Lease/LeaseTimeToLive")-ttl
	t.Logf("%d intervals: %d keepalives, %d key checks", intervals, kaN, ttlN)
	assert.LessOrEqual(t, kaN, intervals+1, "keepalives")
	assert.LessOrEqual(t, ttlN, intervals+1, "key checks")

	// A key deleted by someone else: that grant ends, the others live.
	victim := held[locks/2]
	deleted := time.Now()
	_, err := c.Client(t).Delete(ctx, victim.(*lock.Grant).Key())
	require.NoError(t, err)
	<-victim.Done()
	t.Logf("deletion reported after %v (heartbeat %v)", time.Since(deleted).Round(time.Millisecond), heartbeat)
	assert.ErrorIs(t, victim.Err(), lock.ErrKeyDeleted)
	alive := 0
	for _, h := range held {
		if h.Err() == nil {
			alive++
		}
	}
	assert.Equal(t, locks-1, alive)

	next.Store(0)
	for range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < locks; i = next.Add(1) - 1 {
				if h := held[i]; h != victim {
					assert.NoError(t, h.Unlock(ctx))
				}
			}
		})
	}
	wg.Wait()
}
