// Package retry runs dlock's etcd requests so that they ride out an etcd
// leader election (a leader crashed, partitioned or paused) within the
// caller's own bound, instead of failing or hanging until then.
//
// During an election a request forwarded to a leader that has just died
// is lost: etcd answers it only at its request timeout (5s + 2 election
// timeouts by default), and a follower may go on forwarding to the dead
// leader for up to two election timeouts. Each attempt therefore has a
// bound of its own (FirstAttempt for the first three, then doubling, up to
// MaxAttempt), after which it is sent again, usually to another member;
// etcd's refusals of an election (no leader, leader changed, a server
// timeout) are sent again after a short backoff. A caller that wants a
// member without a leader to refuse at once, rather than wait for the
// attempt's bound, passes a ctx with clientv3.WithRequireLeader (the
// session's lease requests do; the queue's, on the hot path, do not: the
// header costs more per request than the bound saves once per election).
//
// A retried request may have been applied already (its reply was lost):
// Do is for requests that are safe to send twice: reads, lease grants,
// keepalives and revokes, deletes and puts of the caller's own keys, and
// the queue's transactions, whose compares make a second copy fail or do
// nothing (see internal/queue's "Late writes").
package retry

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Bounds of the attempts and of the waits between them.
const (
	// FirstAttempt is the deadline of a request's first three attempts;
	// each later attempt that runs out of time doubles it, up to
	// MaxAttempt. It is far above a healthy cluster's latency and below
	// etcd's request timeout, so that a request lost with a dead leader is
	// sent again soon after the election; the doubling serves a cluster
	// that is merely slow.
	FirstAttempt = time.Second
	MaxAttempt   = 8 * time.Second

	minBackoff = 25 * time.Millisecond
	maxBackoff = 400 * time.Millisecond
)

// Do runs op until it succeeds, fails in a way no retry mends (permission
// denied, a lease not found, a compare's outcome: anything but the
// transient errors of an election), or ctx ends. op gets a context that
// its attempt's bound cancels. When ctx ends, the error matches ctx.Err().
func Do[T any](ctx context.Context, op func(ctx context.Context) (T, error)) (T, error) {
	attempt, backoff, timeouts := FirstAttempt, minBackoff, 0
	for {
		// The attempt's bound is a cancel, not a deadline: a deadline goes
		// to the server with each request (grpc-timeout), which costs
		// etcd measurably more per request than a cancel that never comes.
		actx, cancel := context.WithCancel(ctx)
		t := time.AfterFunc(attempt, cancel)
		v, err := op(actx)
		timedOut := !t.Stop() && ctx.Err() == nil
		cancel()
		switch {
		case err == nil:
			return v, nil
		case ctx.Err() != nil:
			if !errors.Is(err, ctx.Err()) {
				err = errors.Join(ctx.Err(), err)
			}
			return v, err
		case !timedOut && !Transient(err):
			return v, err
		}
		if timedOut {
			if timeouts++; timeouts >= 3 {
				attempt = min(2*attempt, MaxAttempt)
			}
		}
		wait := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			wait.Stop()
			return v, errors.Join(ctx.Err(), err)
		case <-wait.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// Transient reports whether err is one of the errors of an election or a
// lost connection, which a later attempt may not meet: no leader, a leader
// that changed or failed, a server timeout, a member stopping or
// unreachable, too many requests (etcd's codes Unavailable,
// ResourceExhausted, DeadlineExceeded).
func Transient(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return transientCode(ee.Code())
	}
	if s, ok := status.FromError(err); ok {
		return transientCode(s.Code())
	}
	return false
}

func transientCode(c codes.Code) bool {
	return c == codes.Unavailable || c == codes.ResourceExhausted || c == codes.DeadlineExceeded
}

// TimeToLive is lease's TimeToLive of id run through Do.
func TimeToLive(ctx context.Context, lease clientv3.Lease, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	return Do(ctx, func(ctx context.Context) (*clientv3.LeaseTimeToLiveResponse, error) {
		return lease.TimeToLive(ctx, id, opts...)
	})
}

// KV is an etcd KV whose every request runs through Do, so that each
// rides out an election; a Txn is committed through Do as a whole.
type KV struct{ kv clientv3.KV }

// NewKV returns kv's requests run through Do.
func NewKV(kv clientv3.KV) KV { return KV{kv} }

func (r KV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	return Do(ctx, func(ctx context.Context) (*clientv3.PutResponse, error) { return r.kv.Put(ctx, key, val, opts...) })
}

func (r KV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	return Do(ctx, func(ctx context.Context) (*clientv3.GetResponse, error) { return r.kv.Get(ctx, key, opts...) })
}

func (r KV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	return Do(ctx, func(ctx context.Context) (*clientv3.DeleteResponse, error) { return r.kv.Delete(ctx, key, opts...) })
}

// Txn returns a transaction committed through Do.
func (r KV) Txn(ctx context.Context) clientv3.Txn { return &txn{kv: r.kv, ctx: ctx} }

// txn collects a transaction and commits it through Do.
type txn struct {
	kv               clientv3.KV
	ctx              context.Context
	cmps             []clientv3.Cmp
	thenOps, elseOps []clientv3.Op
}

func (t *txn) If(cs ...clientv3.Cmp) clientv3.Txn { t.cmps = append(t.cmps, cs...); return t }

func (t *txn) Then(ops ...clientv3.Op) clientv3.Txn { t.thenOps = append(t.thenOps, ops...); return t }

func (t *txn) Else(ops ...clientv3.Op) clientv3.Txn { t.elseOps = append(t.elseOps, ops...); return t }

func (t *txn) Commit() (*clientv3.TxnResponse, error) {
	return Do(t.ctx, func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return t.kv.Txn(ctx).If(t.cmps...).Then(t.thenOps...).Else(t.elseOps...).Commit()
	})
}
