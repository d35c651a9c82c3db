package session

import (
	"context"
	"errors"
	"fmt"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// keepalive is the session's lease keepalive stream: one gRPC stream, kept
// open from one heartbeat to the next, carrying one request per heartbeat.
//
// etcd's client offers KeepAliveOnce, which opens a stream per call (a
// new HTTP/2 stream, a server goroutine and its interceptors, each time),
// and KeepAlive, which shares one stream per client but does not say when
// the request a reply answers was sent. The local deadline needs that send
// time: it is send time + TTL − margin, and is only safe if the send came
// before the server renewed. So the session keeps its own stream with at
// most one request in flight: the reply on it answers that request (etcd
// answers a stream's requests in order, one reply each), sent at the time
// the heartbeat recorded. A stream whose request failed or timed out is
// dropped, never reused, so a late reply can never be taken for a later
// request's.
//
// Only the heartbeat loop uses it.
type keepalive struct {
	cli    *clientv3.Client
	id     clientv3.LeaseID
	ctx    context.Context               // the loop's, with WithRequireLeader: streams live within it
	stream pb.Lease_LeaseKeepAliveClient // nil until opened, and after an error
	sctx   context.Context               // the stream's, once one is opened or being opened
	cancel context.CancelFunc            // ends sctx and so the stream
}

// once sends one keepalive and waits for its reply, within ctx. It opens a
// stream if there is none; on any error it drops the stream. A lease that
// is gone is rpctypes.ErrLeaseNotFound, as from KeepAliveOnce.
func (k *keepalive) once(ctx context.Context) (*pb.LeaseKeepAliveResponse, error) {
	reused := k.stream != nil
	resp, err := k.try(ctx)
	if err != nil && reused && ctx.Err() == nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		// The stream kept from an earlier heartbeat may have ended while
		// idle (a member restarted, a proxy reset it): the request never
		// reached a server. Once more, on a new stream.
		resp, err = k.try(ctx)
	}
	return resp, err
}

// try is once's one attempt, on the open stream or a new one.
func (k *keepalive) try(ctx context.Context) (*pb.LeaseKeepAliveResponse, error) {
	if k.cancel == nil {
		k.sctx, k.cancel = context.WithCancel(k.ctx)
	}
	// ctx bounds this exchange (and the stream's opening): when it ends
	// first, the stream is ended with it, which ends a blocked Send or
	// Recv.
	stop := context.AfterFunc(ctx, k.cancel)
	resp, err := k.exchange()
	if !stop() || err != nil {
		k.close() // ended by ctx, or failed: a stream is never reused after an error
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if resp.TTL <= 0 {
		return nil, rpctypes.ErrLeaseNotFound
	}
	return resp, nil
}

// exchange sends one request on the stream and receives its reply.
func (k *keepalive) exchange() (*pb.LeaseKeepAliveResponse, error) {
	if k.stream == nil {
		// WaitForReady, as etcd's client calls it: a connection still
		// being made is waited for (within the attempt) rather than failed.
		stream, err := pb.NewLeaseClient(k.cli.ActiveConnection()).LeaseKeepAlive(k.sctx, grpc.WaitForReady(true))
		if err != nil {
			return nil, rpctypes.Error(err)
		}
		k.stream = stream
	}
	// A Send on a stream that has ended returns io.EOF; Recv says why.
	if err := k.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(k.id)}); err != nil && !errors.Is(err, io.EOF) {
		return nil, rpctypes.Error(err)
	}
	resp, err := k.stream.Recv()
	if err != nil {
		return nil, rpctypes.Error(err)
	}
	if resp.ID != int64(k.id) {
		return nil, fmt.Errorf("keepalive of lease %x answered for lease %x", int64(k.id), resp.ID)
	}
	return resp, nil
}

// close ends the stream, if any.
func (k *keepalive) close() {
	if k.cancel != nil {
		k.cancel()
	}
	k.stream, k.sctx, k.cancel = nil, nil, nil
}
