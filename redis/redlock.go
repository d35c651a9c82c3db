package redis

import (
	"context"
	"fmt"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/fault"
	"github.com/dlock-go/dlock/internal/obs"
	"github.com/dlock-go/dlock/lock"
)

// MinRedlockNodes is the fewest nodes NewRedlock accepts.
const MinRedlockNodes = 3

// Redlock is the Redlock algorithm over N ≥ 3 independent Redis masters: a
// grant needs SET NX (with the TTL) on a majority (N/2+1), sent to all
// nodes in parallel, and is valid for TTL − elapsed − drift. Every call
// (acquire, extend, release) decides as soon as the answers so far settle
// it (a majority acted, or cannot) or the node timeout passed, without
// waiting for the other nodes: a stalled node costs nothing while a
// majority answers, and at most the node timeout otherwise. The requests
// it did not wait for finish in the background (see Drain).
//
// It survives the crash of a minority of nodes, under the assumptions that
// the package documentation lists (bounded clock drift and pauses, nodes
// that do not come back empty within a TTL). It has NO sound fencing token:
// Token().Seq is always 0, so every
// fence.Guard rejects its grants with fence.ErrNoToken. Use it as an
// efficiency lock.
//
// A Redlock is a handle, safe for concurrent use. The zero value is not
// usable; call NewRedlock.
type Redlock struct {
	nodes  []node
	addrs  []string
	name   string
	keys   keys
	o      options
	quorum int
	tel    *obs.T
}

var _ lock.Locker = (*Redlock)(nil)

// NewRedlock returns a Redlock for the lock called name over clients, one
// per independent master. It needs at least MinRedlockNodes clients, none
// nil and no two the same client or address (errors match ErrInvalidOption
// and name the field), a name that lock.ValidateName accepts (errors match
// ErrInvalidName), and valid options. An even N is accepted but tolerates no
// more failures than N−1 nodes would. It does not contact the servers.
func NewRedlock(clients []goredis.UniversalClient, name string, opts ...Option) (*Redlock, error) {
	if len(clients) < MinRedlockNodes {
		return nil, fmt.Errorf("%w: clients: redlock needs at least %d independent nodes, got %d", ErrInvalidOption, MinRedlockNodes, len(clients))
	}
	addrs := make([]string, len(clients))
	for i, c := range clients {
		if err := checkClient(c, fmt.Sprintf("clients[%d]", i)); err != nil {
			return nil, err
		}
		if cl, ok := c.(*goredis.Client); ok {
			addrs[i] = cl.Options().Addr
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
	nodes := make([]node, len(clients))
	for i, c := range clients {
		nodes[i] = newNode(c, o.nodeTimeout)
	}
	return &Redlock{
		nodes:  nodes,
		addrs:  addrs,
		name:   name,
		keys:   newKeys(o.prefix, name),
		o:      o,
		quorum: len(clients)/2 + 1,
		tel:    obs.New(o.tel, "redlock"),
	}, nil
}

// LockKey returns "redlock:" and the lock's key: its place in
// lock.LockAll's order.
func (r *Redlock) LockKey() string { return "redlock:" + r.keys.lock }

// Lock waits until a majority grants the lock or ctx ends. Between attempts
// it waits for a release notification from any node or a random delay (at
// most the retry max); only a grant's Unlock notifies, not an attempt that
// failed and deletes its partial keys. On ctx end it returns an error
// matching ctx.Err() and leaves no key behind. The lock.Held is a *Grant
// whose Token has Seq 0.
func (r *Redlock) Lock(ctx context.Context) (lock.Held, error) {
	return lockWith(ctx, r, r.tel, r.name, &r.o)
}

// TryLock makes one attempt. If no majority grants the lock it returns an
// error matching ErrNoQuorum, and also ErrLocked (and lock.ErrLocked) if
// another grant holds the lock on some nodes; the message names each node
// that failed. The lock.Held is a *Grant whose Token has Seq 0.
func (r *Redlock) TryLock(ctx context.Context) (lock.Held, error) {
	return tryLockWith(ctx, r, r.tel, r.name)
}

// nodeResult is one node's reply in a fan-out.
type nodeResult struct {
	n   int64
	err error
}

// nodeFunc is one request to a node, on the client that node.do gives.
type nodeFunc func(ctx context.Context, c goredis.UniversalClient) (int64, error)

// round is one request fanned out to some of the nodes. Replies that
// arrive before the round is decided count; later ones go to the round's
// late handler, in the node's goroutine.
type round struct {
	mu      sync.Mutex
	res     []nodeResult // by node index
	got     []bool       // by node index: res is set
	answers int
	ok      int // replies n == 1
	held    int // replies n != 1
	failed  int // errors
	decided bool
	// alive is set on an acquire round while its grant is held (from the
	// grant until Unlock starts): a node that grants late then keeps the
	// key; otherwise a late grant is deleted.
	alive bool
	// granted is set with the first alive and never cleared: the round
	// became a grant. Only a grant's keys are deleted with a release
	// (which wakes the waiters); an attempt that was never one discards
	// its keys silently (see discardScript).
	granted bool
	// kept[i]: node i answered the acquire after the decision, while the
	// grant was held (so its key, if any, is Unlock's to delete).
	kept []bool        // by node index
	wake chan struct{} // the replies settle the round, or all arrived
}

// fanout sends fn to nodes, each in a goroutine counted against its
// client (see Drain) and bounded by the node timeout alone, whatever
// becomes of ctx (a straggler must still reach its node: go-redis drops
// a command that waits for a connection when its ctx ends), and decides
// as soon as every node answered, enough (called with the counts so far:
// n == 1, other n, errors) says the outcome is settled, the node timeout
// passed, or ctx ended; the caller is woken once, when the round can be
// decided, not per reply. A node that answers after that is a straggler:
// late (if not nil) receives its reply. fanout returns the round and the
// tally at the decision, in which a node that had not answered counts as
// failed only if the timeout or ctx decided.
func (r *Redlock) fanout(ctx context.Context, op string, nodes []int, fn nodeFunc,
	enough func(ok, held, failed int) bool, late func(rd *round, i int, nr nodeResult)) (*round, *quorumError) {
	rd := &round{
		res:  make([]nodeResult, len(r.nodes)),
		got:  make([]bool, len(r.nodes)),
		kept: make([]bool, len(r.nodes)),
		wake: make(chan struct{}, 1),
	}
	for _, i := range nodes {
		nd := &r.nodes[i]
		goCounted(nd.client, func() {
			var n int64
			err := nd.do(context.WithoutCancel(ctx), r.keys.lock, r.o.nodeTimeout, func(ctx context.Context, c goredis.UniversalClient) (err error) {
				n, err = fn(ctx, c)
				return err
			})
			rd.mu.Lock()
			if rd.decided {
				rd.mu.Unlock()
				if late != nil {
					late(rd, i, nodeResult{n, err})
				}
				return
			}
			rd.res[i], rd.got[i] = nodeResult{n, err}, true
			rd.answers++
			switch {
			case err != nil:
				rd.failed++
			case n == 1:
				rd.ok++
			default:
				rd.held++
			}
			ready := rd.answers == len(nodes) || enough(rd.ok, rd.held, rd.failed)
			rd.mu.Unlock()
			if ready {
				select {
				case rd.wake <- struct{}{}:
				default:
				}
			}
		})
	}
	timer := time.NewTimer(r.o.nodeTimeout)
	defer timer.Stop()
	var why error
	select {
	case <-rd.wake:
	case <-timer.C:
		why = fmt.Errorf("no reply within the node timeout (%v)", r.o.nodeTimeout)
	case <-ctx.Done():
		why = ctx.Err()
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	rd.decided = true
	return rd, r.tally(op, rd, nodes, why)
}

// tally counts a round's replies, in node order: ok (n == 1), refused
// (n == 0) and errors; a node that has not answered counts as failed with
// why if why is not nil, and not at all otherwise. rd.mu must be held.
func (r *Redlock) tally(op string, rd *round, nodes []int, why error) *quorumError {
	qe := &quorumError{op: op, name: r.name, quorum: r.quorum, nodes: len(r.nodes)}
	for _, i := range nodes {
		nr := rd.res[i]
		switch {
		case !rd.got[i]:
			if why != nil {
				qe.errs = append(qe.errs, nodeError(i, r.addrs[i], why))
			}
		case nr.err != nil:
			qe.errs = append(qe.errs, nodeError(i, r.addrs[i], nr.err))
		case nr.n == 1:
			qe.ok++
		default:
			qe.held++
		}
	}
	return qe
}

// settled reports whether replies decide a round on all nodes: a majority
// acted (ok), or so many refused (held) or failed that no majority can.
func (r *Redlock) settled(ok, held, failed int) bool {
	return ok >= r.quorum || held+failed > len(r.nodes)-r.quorum
}

// allNodes returns 0..N-1.
func (r *Redlock) allNodes() []int {
	nodes := make([]int, len(r.nodes))
	for i := range nodes {
		nodes[i] = i
	}
	return nodes
}

func (r *Redlock) attempt(ctx context.Context, op, _ string) (*Grant, time.Duration, error) {
	value := newValue(r.o.owner)
	start := fault.Now()
	// A plain SET NX with the TTL: a Redlock has no token to count and no
	// waiter registry, so it needs nothing of the Mutex's acquire script.
	setNX := func(ctx context.Context, c goredis.UniversalClient) (int64, error) {
		ok, err := c.SetNX(ctx, r.keys.lock, value, r.o.ttl).Result()
		if err != nil || !ok {
			return 0, err
		}
		return 1, nil
	}
	// A node that answers after the decision deletes its key again unless
	// it answered while the grant is held (Unlock then deletes it): the
	// grant does not count it, and Unlock leaves the nodes whose acquire
	// is still out to this. A SET without a reply may have landed (or
	// land when a stalled node resumes): its delete waits for that. The
	// delete wakes the waiters only if it finishes a grant's Unlock; a key
	// of an attempt that failed (or of a grant still held, which its
	// majority keeps) is discarded without a wake-up.
	late := func(rd *round, i int, nr nodeResult) {
		rd.mu.Lock()
		keep := rd.alive
		released := rd.granted && !rd.alive // the grant's Unlock has started
		rd.kept[i] = keep
		rd.mu.Unlock()
		if nr.err == nil && (nr.n != 1 || keep) {
			return
		}
		del := r.discarder(value)
		if released {
			del = r.releaser(value)
		}
		r.nodes[i].cleanupNow(ctx, r.keys.lock, errOnly(del))
	}
	rd, qe := r.fanout(ctx, op, r.allNodes(), setNX, r.settled, late)
	validity := r.o.ttl - fault.Since(start) - r.o.driftAllowance()
	if qe.ok >= r.quorum && validity > 0 {
		rd.mu.Lock()
		rd.alive, rd.granted = true, true
		rd.mu.Unlock()
		return newGrant(r.name, 0, value, &redlockGrant{r: r, rd: rd}, &r.o, start, r.tel), 0, nil
	}
	qe.expired = qe.ok >= r.quorum
	// Delete the partial keys, where the SET may have landed: nodes that
	// granted, and nodes that failed (the SET may have landed without its
	// reply reaching us); a delete without a reply is sent again in the
	// background. Nodes that have not answered clean up after themselves
	// (late). This was never a grant, so the delete wakes nobody
	// (discardScript): a waiter that a partial key refused finds it gone
	// at its next poll (see acquire).
	var dirty []int
	rd.mu.Lock()
	for i, got := range rd.got {
		if got && (rd.res[i].err != nil || rd.res[i].n == 1) {
			dirty = append(dirty, i)
		}
	}
	rd.mu.Unlock()
	if len(dirty) > 0 {
		again := errOnly(r.discarder(value))
		rr, _ := r.fanout(context.WithoutCancel(ctx), "unlock", dirty, r.discarder(value), func(int, int, int) bool { return false },
			func(_ *round, i int, nr nodeResult) {
				if nr.err != nil {
					r.nodes[i].cleanupNow(ctx, r.keys.lock, again)
				}
			})
		rr.mu.Lock()
		for _, i := range dirty {
			if rr.got[i] && rr.res[i].err != nil {
				r.nodes[i].cleanup(ctx, r.keys.lock, again)
			}
		}
		rr.mu.Unlock()
	}
	return nil, 0, qe
}

// releaser returns the release of a grant's value on a node: a
// compare-and-delete that wakes the waiters (releaseScript) and returns 1
// if it deleted the key.
func (r *Redlock) releaser(value string) nodeFunc {
	return func(ctx context.Context, c goredis.UniversalClient) (int64, error) {
		return releaseScript.Run(ctx, c, []string{r.keys.lock}, value, r.keys.channel).Int64()
	}
}

// discarder returns the delete of the value of an attempt that was never a
// grant on a node: a compare-and-delete that wakes nobody (discardScript)
// and returns 1 if it deleted the key.
func (r *Redlock) discarder(value string) nodeFunc {
	return func(ctx context.Context, c goredis.UniversalClient) (int64, error) {
		return discardScript.Run(ctx, c, []string{r.keys.lock}, value).Int64()
	}
}

// errOnly is fn for node.cleanup.
func errOnly(fn nodeFunc) func(ctx context.Context, c goredis.UniversalClient) error {
	return func(ctx context.Context, c goredis.UniversalClient) error {
		_, err := fn(ctx, c)
		return err
	}
}

// subscribe implements attempter: a waiter listens to the release channel
// on every node (a release publishes on each node it deletes from).
func (r *Redlock) subscribe(ctx context.Context, _ string) *waker {
	nodes := make([]*node, len(r.nodes))
	for i := range r.nodes {
		nodes[i] = &r.nodes[i]
	}
	return subscribe(ctx, nodes, r.keys.lock, r.keys.channel, r.quorum)
}

// leave implements attempter: a Redlock waiter is not registered anywhere.
func (r *Redlock) leave(context.Context, string) {}

// redlockGrant is the grantOps of one Redlock grant: its acquire round
// (which its late nodes consult) and the Redlock.
type redlockGrant struct {
	r  *Redlock
	rd *round
}

// extend implements grantOps: the grant lives on if a majority extends it.
// It decides as soon as a majority extended (or cannot), or the node
// timeout passed.
func (g *redlockGrant) extend(ctx context.Context, value string) (time.Time, error) {
	r := g.r
	start := fault.Now()
	_, qe := r.fanout(ctx, "extend", r.allNodes(), func(ctx context.Context, c goredis.UniversalClient) (int64, error) {
		return extendScript.Run(ctx, c, []string{r.keys.lock}, value, r.o.ttl.Milliseconds()).Int64()
	}, r.settled, nil)
	if qe.ok < r.quorum {
		return start, qe
	}
	return start, nil
}

// release implements grantOps: compare-and-delete on every node that has
// answered the acquire, decided as soon as a majority released (or
// cannot), or the node timeout passed. A node whose acquire is still out
// deletes its key itself when it answers, instead of also getting this
// delete (which could reach it before its SET); it counts as a node where
// the grant is gone, since it will not keep it.
func (g *redlockGrant) release(ctx context.Context, value string) error {
	r := g.r
	g.rd.mu.Lock()
	g.rd.alive = false
	var nodes []int
	for i := range r.nodes {
		if g.rd.got[i] || g.rd.kept[i] {
			nodes = append(nodes, i)
		}
	}
	g.rd.mu.Unlock()
	out := len(r.nodes) - len(nodes)
	_, qe := r.fanout(ctx, "unlock", nodes, r.releaser(value),
		func(ok, held, failed int) bool { return r.settled(ok, held+out, failed) }, nil)
	qe.held += out
	if qe.ok < r.quorum {
		return qe
	}
	return nil
}
