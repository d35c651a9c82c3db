package redis

import (
	"context"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/cleanup"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/lock"
)

// MinRedlockNodes is the fewest nodes NewRedlock accepts.
const MinRedlockNodes = 3

// Redlock is the Redlock algorithm over N ≥ 3 independent Redis masters: a
// grant needs SET NX PX on a majority (N/2+1), sent to all nodes in
// parallel with a per-node timeout, and is valid for TTL − elapsed − drift.
//
// It survives the crash of a minority of nodes, under the assumptions that
// the package documentation lists (bounded clock drift and pauses, nodes
// that do not come back empty within a TTL). It has NO sound fencing token:
// Token().Seq is 0 and its Capabilities say FencingTokens false, so every
// fence.Guard rejects its grants with fence.ErrNoToken. Use it as an
// efficiency lock.
//
// A Redlock is a handle, safe for concurrent use. The zero value is not
// usable; call NewRedlock.
type Redlock struct {
	clients []goredis.UniversalClient
	addrs   []string
	name    string
	keys    keys
	o       options
	quorum  int
}

var _ lock.Locker = (*Redlock)(nil)

// NewRedlock returns a Redlock for the lock called name over clients, one
// per independent master. It needs at least MinRedlockNodes clients, none
// nil and no two the same client or address (errors match ErrInvalidOption
// and name the field), a name that lock.ValidateName accepts (errors match
// ErrInvalidName), and valid options. An even N is accepted but tolerates no
// more failures than N−1. It does not contact the servers.
func NewRedlock(clients []goredis.UniversalClient, name string, opts ...Option) (*Redlock, error) {
	if len(clients) < MinRedlockNodes {
		return nil, fmt.Errorf("%w: clients: redlock needs at least %d independent nodes, got %d", ErrInvalidOption, MinRedlockNodes, len(clients))
	}
	addrs := make([]string, len(clients))
	for i, c := range clients {
		if isNil(c) {
			return nil, fmt.Errorf("%w: clients[%d] is nil", ErrInvalidOption, i)
		}
		if cl, ok := c.(*goredis.Client); ok {
			addrs[i] = cl.Options().Addr
			if !cl.Options().ContextTimeoutEnabled {
				return nil, fmt.Errorf("%w: clients[%d] (%s): Options.ContextTimeoutEnabled is false, so go-redis would ignore the per-node timeout on a stalled node (up to its ReadTimeout) and eat the lock's validity; set it to true", ErrInvalidOption, i, addrs[i])
			}
		}
		for j := range i {
			if clients[j] == c {
				return nil, fmt.Errorf("%w: clients[%d] and clients[%d] are the same client; redlock needs independent nodes", ErrInvalidOption, j, i)
			}
			if addrs[i] != "" && addrs[j] == addrs[i] {
				return nil, fmt.Errorf("%w: clients[%d] and clients[%d] both point at %s; redlock needs independent nodes", ErrInvalidOption, j, i, addrs[i])
			}
		}
	}
	o, err := build(name, opts, true)
	if err != nil {
		return nil, err
	}
	return &Redlock{
		clients: append([]goredis.UniversalClient(nil), clients...),
		addrs:   addrs,
		name:    name,
		keys:    newKeys(o.prefix, name),
		o:       o,
		quorum:  len(clients)/2 + 1,
	}, nil
}

// Name returns the lock's name.
func (r *Redlock) Name() string { return r.name }

// Quorum returns how many nodes a grant needs: N/2+1.
func (r *Redlock) Quorum() int { return r.quorum }

// Capabilities reports what a Redlock guarantees: no fencing tokens, no FIFO
// order, TTL liveness, and exclusion that survives the loss of a minority
// of nodes (under the assumptions in the package documentation).
func (r *Redlock) Capabilities() lock.Capabilities {
	return lock.Capabilities{
		Exclusive:        true,
		FencingTokens:    false,
		FIFO:             false,
		Liveness:         lock.LivenessTTL,
		SurvivesFailover: true,
	}
}

// Lock waits until a majority grants the lock or ctx ends. Between attempts
// it waits for a release notification from any node or a random delay. On
// ctx end it returns an error matching ctx.Err() and leaves no key behind.
// The lock.Held is a *Grant whose Token has Seq 0.
func (r *Redlock) Lock(ctx context.Context) (lock.Held, error) {
	g, err := acquire(ctx, r, r.name, &r.o, r.clients, r.keys.channel)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// TryLock makes one attempt. If no majority grants the lock it returns a
// *QuorumError, which matches ErrNoQuorum, and also ErrLocked (and
// lock.ErrLocked) if another grant holds the lock on some nodes. The
// lock.Held is a *Grant whose Token has Seq 0.
func (r *Redlock) TryLock(ctx context.Context) (lock.Held, error) {
	if err := ctx.Err(); err != nil {
		return nil, errs.New("redis", r.name, "try lock", err)
	}
	g, _, err := r.attempt(ctx)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// nodeResult is one node's reply in a fan-out.
type nodeResult struct {
	n   int64
	err error
}

// fanout runs fn on every node in parallel, each bounded by the node
// timeout, and returns when all have answered or timed out.
func (r *Redlock) fanout(ctx context.Context, fn func(ctx context.Context, c goredis.UniversalClient) (int64, error)) []nodeResult {
	res := make([]nodeResult, len(r.clients))
	var wg sync.WaitGroup
	for i, c := range r.clients {
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, r.o.nodeTimeout)
			defer cancel()
			res[i].n, res[i].err = fn(nctx, c)
		})
	}
	wg.Wait()
	return res
}

// tally counts a fan-out's replies: ok (n == 1), refused (n == 0) and errors.
func (r *Redlock) tally(op string, res []nodeResult) *QuorumError {
	qe := &QuorumError{Op: op, Name: r.name, Quorum: r.quorum, Nodes: len(r.clients)}
	for i, nr := range res {
		switch {
		case nr.err != nil:
			qe.Errs = append(qe.Errs, &NodeError{Node: i, Addr: r.addrs[i], Err: nr.err})
		case nr.n == 1:
			qe.OK++
		default:
			qe.Held++
		}
	}
	return qe
}

func (r *Redlock) attempt(ctx context.Context) (*Grant, time.Duration, error) {
	value := newValue(r.o.owner)
	start := time.Now()
	res := r.fanout(ctx, func(ctx context.Context, c goredis.UniversalClient) (int64, error) {
		v, err := acquireScript.Run(ctx, c, []string{r.keys.lock, r.keys.seq}, value, r.o.ttl.Milliseconds(), "0").Int64Slice()
		if err != nil {
			return 0, err
		}
		if len(v) != 2 {
			return 0, fmt.Errorf("acquire script returned %v", v)
		}
		return v[0], nil
	})
	qe := r.tally("lock", res)
	validity := r.o.ttl - time.Since(start) - r.o.driftAllowance()
	if qe.OK >= r.quorum && validity > 0 {
		return newGrant(r.name, 0, value, r, &r.o, start), 0, nil
	}
	qe.Expired = qe.OK >= r.quorum
	// Release everywhere, including nodes that failed: the SET may have
	// landed without its reply reaching us.
	cctx, cancel := cleanup.Context(ctx)
	defer cancel()
	_ = r.release(cctx, value)
	return nil, 0, qe
}

// extend implements grantOps: the grant lives on if a majority extends it.
func (r *Redlock) extend(ctx context.Context, value string) (time.Time, error) {
	start := time.Now()
	res := r.fanout(ctx, func(ctx context.Context, c goredis.UniversalClient) (int64, error) {
		return extendScript.Run(ctx, c, []string{r.keys.lock}, value, r.o.ttl.Milliseconds()).Int64()
	})
	if qe := r.tally("extend", res); qe.OK < r.quorum {
		return start, qe
	}
	return start, nil
}

// release implements grantOps: compare-and-delete on every node.
func (r *Redlock) release(ctx context.Context, value string) error {
	res := r.fanout(ctx, func(ctx context.Context, c goredis.UniversalClient) (int64, error) {
		return releaseScript.Run(ctx, c, []string{r.keys.lock}, value, r.keys.channel).Int64()
	})
	if qe := r.tally("unlock", res); qe.OK < r.quorum {
		return qe
	}
	return nil
}
