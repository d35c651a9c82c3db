package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/fault"
	"github.com/dlock-go/dlock/internal/obs"
	"github.com/dlock-go/dlock/lock"
)

// Mutex is a lock on one Redis node (or one master of a cluster or failover
// group): SET NX PX with a random value, released by compare-and-delete, and
// a fencing token minted by INCR in the same script.
//
// Use it as an efficiency lock: it keeps two holders apart while the node
// keeps its data and the holder's pauses stay shorter than the TTL. Its
// token stays monotonic only as long as the node's data lives; see the
// package documentation.
//
// On a Sentinel failover client or a Cluster client, a failover breaks
// both: replication is asynchronous, so the promoted replica may not have
// seen the current grant and grants the lock again while it is still
// valid (two holders), and may hand out the same token again (its counter
// missed the last INCRs).
//
// A Mutex is a handle, safe for concurrent use: several goroutines may lock
// through it, each getting its own grant. The zero value is not usable; call
// New.
type Mutex struct {
	node node
	name string
	keys keys
	o    options
	tel  *obs.T
}

var _ lock.Locker = (*Mutex)(nil)

// New returns a Mutex for the lock called name on client. It validates name
// with lock.ValidateName (errors match ErrInvalidName) and the options
// (errors match ErrInvalidOption and name the field). It does not contact
// the server.
func New(client goredis.UniversalClient, name string, opts ...Option) (*Mutex, error) {
	if err := checkClient(client, "client"); err != nil {
		return nil, err
	}
	o, err := build(name, opts, false)
	if err != nil {
		return nil, err
	}
	if o.replicas > 0 {
		switch client.(type) {
		case *goredis.Client, *goredis.ClusterClient:
		default:
			return nil, fmt.Errorf("%w: replicas: WAIT needs a *redis.Client or *redis.ClusterClient, not %T", ErrInvalidOption, client)
		}
	}
	return &Mutex{node: newNode(client, o.nodeTimeout), name: name, keys: newKeys(o.prefix, name), o: o, tel: obs.New(o.tel, "redis")}, nil
}

// LockKey returns "redis:" and the lock's key: its place in lock.LockAll's
// order.
func (m *Mutex) LockKey() string { return "redis:" + m.keys.lock }

// Lock waits until the lock is granted or ctx ends. A waiter is woken by the
// holder's release and otherwise polls with jittered backoff, never later
// than the holder's TTL; waiters are not served in order. When ctx ends it
// returns an error matching ctx.Err() within about the node timeout, also
// from a stalled node, and leaves no key behind. Errors other than
// contention (a node down, a grant that too few replicas acknowledged) are
// retried until ctx ends; the last refusal before ctx ended is quoted in
// the returned error. The lock.Held is a *Grant.
func (m *Mutex) Lock(ctx context.Context) (lock.Held, error) {
	return lockWith(ctx, m, m.tel, m.name, &m.o)
}

// TryLock makes one attempt: it returns an error matching ErrLocked (and
// lock.ErrLocked) at once if another grant holds the lock, and any other
// error (a node down, no reply within the node timeout) as it is. The
// lock.Held is a *Grant.
func (m *Mutex) TryLock(ctx context.Context) (lock.Held, error) {
	return tryLockWith(ctx, m, m.tel, m.name)
}

// acquireReply is the acquire script's answer.
type acquireReply struct {
	granted bool
	n       int64 // the token if granted, else the holder's remaining validity (ms)
}

func (m *Mutex) attempt(ctx context.Context, op, wid string) (*Grant, time.Duration, error) {
	value := newValue(m.o.owner)
	start := fault.Now()
	// WAIT may take its own timeout on top of the node timeout.
	d := m.o.nodeTimeout
	if m.o.replicas > 0 {
		d += m.o.replicaTimeout
	}
	var r acquireReply
	err := m.node.do(ctx, m.keys.lock, d, func(ctx context.Context, c goredis.UniversalClient) (err error) {
		r, err = m.grant(ctx, c, value, wid)
		return err
	})
	if err != nil {
		// The script may have run although we saw no reply (a timeout):
		// delete what may be ours.
		m.undo(ctx, value)
		return nil, 0, errs.New("redis", m.name, op, err)
	}
	if !r.granted {
		return nil, time.Duration(r.n) * time.Millisecond, errs.New("redis", m.name, op, ErrLocked)
	}
	if cerr := ctx.Err(); cerr != nil {
		// Granted after the caller's ctx ended: give it back.
		m.undo(ctx, value)
		return nil, 0, errs.New("redis", m.name, op, cerr)
	}
	if !fault.Now().Before(start.Add(m.o.ttl - m.o.driftAllowance())) {
		m.undo(ctx, value)
		return nil, 0, errs.New("redis", m.name, op, fmt.Errorf("no validity left after the acquire round trip (ttl %v)", m.o.ttl))
	}
	return newGrant(m.name, uint64(r.n), value, m, &m.o, start, m.tel), 0, nil
}

// undo deletes the grant value if it is still there (and wakes a waiter
// if it was), as an acquire that failed, came too late or may have
// landed unseen must: at once, within the node timeout, even if ctx
// ended; if that gets no answer either, again in the background, so that
// a node that stalled gets the delete when it resumes.
func (m *Mutex) undo(ctx context.Context, value string) {
	release := func(ctx context.Context, c goredis.UniversalClient) error {
		if err := m.releaseOn(ctx, c, value); err != nil && !errors.Is(err, ErrLockLost) {
			return err
		}
		return nil
	}
	if m.node.do(context.WithoutCancel(ctx), m.keys.lock, m.o.nodeTimeout, release) != nil {
		m.node.cleanup(ctx, m.keys.lock, release)
	}
}

// grant runs the acquire script as waiter wid. With WithReplicas the
// script and WAIT go pipelined on one connection, in one round trip: WAIT
// counts the writes of its own connection, and cannot run inside a
// script.
func (m *Mutex) grant(ctx context.Context, c goredis.UniversalClient, value, wid string) (acquireReply, error) {
	keys, args := m.acquireArgs(value, wid)
	if m.o.replicas == 0 {
		return parseAcquire(acquireScript.Run(ctx, c, keys, args...))
	}
	var cl *goredis.Client
	switch c := c.(type) {
	case *goredis.Client:
		cl = c
	case *goredis.ClusterClient:
		var err error
		if cl, err = c.MasterForKey(ctx, m.keys.lock); err != nil {
			return acquireReply{}, err
		}
	}
	conn := cl.Conn()
	defer conn.Close()
	var acq *goredis.Cmd
	var wait *goredis.Cmd
	// WAIT 0 would block for ever: its timeout is at least 1 ms (as
	// go-redis rounds it).
	waitMs := max(m.o.replicaTimeout.Milliseconds(), 1)
	for _, cached := range []bool{true, false} {
		_, _ = conn.Pipelined(ctx, func(p goredis.Pipeliner) error {
			if cached {
				acq = acquireScript.EvalSha(ctx, p, keys, args...)
			} else { // the server does not have the script (yet): send it
				acq = acquireScript.Eval(ctx, p, keys, args...)
			}
			wait = p.Do(ctx, "wait", m.o.replicas, waitMs)
			return nil
		})
		if err := acq.Err(); !cached || err == nil || !goredis.HasErrorPrefix(err, "NOSCRIPT") {
			break
		}
	}
	r, err := parseAcquire(acq)
	if err != nil || !r.granted {
		return r, err
	}
	acks, err := wait.Int64()
	if err != nil {
		return r, fmt.Errorf("wait for replicas: %w", err)
	}
	if acks < int64(m.o.replicas) {
		return r, fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, acks, m.o.replicas, m.o.replicaTimeout)
	}
	return r, nil
}

// acquireArgs are the acquire script's keys and arguments; a waiter (wid
// not "") is registered if refused, and leaves the waiters if granted.
func (m *Mutex) acquireArgs(value, wid string) ([]string, []any) {
	args := []any{value, m.o.ttl.Milliseconds(), "1"}
	if wid != "" {
		args = append(args, wid, m.waitersTTL().Milliseconds())
	}
	return []string{m.keys.lock, m.keys.seq, m.keys.waiters}, args
}

// parseAcquire reads the acquire script's reply.
func parseAcquire(cmd *goredis.Cmd) (acquireReply, error) {
	res, err := cmd.Int64Slice()
	if err != nil {
		return acquireReply{}, err
	}
	if len(res) != 2 {
		return acquireReply{}, fmt.Errorf("acquire script returned %v", res)
	}
	return acquireReply{granted: res[0] == 1, n: res[1]}, nil
}

// waitersTTL is the expiry of the waiters key, renewed by every refused
// attempt of a waiter: a waiter polls at least every retry max (or the
// holder's remaining TTL, if sooner), so the key outlives every live
// waiter's polls, and vanishes once they have all gone.
func (m *Mutex) waitersTTL() time.Duration { return m.o.ttl + 2*m.o.retryMax }

// subscribe implements attempter: waiter wid listens on its own channel,
// on which a release wakes the oldest waiter only (wake-one).
func (m *Mutex) subscribe(ctx context.Context, wid string) *waker {
	return subscribe(ctx, []*node{&m.node}, m.keys.lock, m.keys.wake+wid, 1)
}

// leave implements attempter: waiter wid, which gives up, leaves the
// waiters; if the lock is free then, the next waiter is woken, in case
// wid had taken the wake-up. Were the call lost, the next release would
// skip wid (nobody listens on its channel) and the waiters key expires on
// its own.
func (m *Mutex) leave(ctx context.Context, wid string) {
	_ = m.node.do(context.WithoutCancel(ctx), m.keys.lock, m.o.nodeTimeout, func(ctx context.Context, c goredis.UniversalClient) error {
		return leaveScript.Run(ctx, c, []string{m.keys.lock, m.keys.waiters}, wid, m.keys.wake, wakeTries).Err()
	})
}

// extend implements grantOps.
func (m *Mutex) extend(ctx context.Context, value string) (time.Time, error) {
	start := fault.Now()
	var n int64
	err := m.node.do(ctx, m.keys.lock, m.o.nodeTimeout, func(ctx context.Context, c goredis.UniversalClient) (err error) {
		n, err = extendScript.Run(ctx, c, []string{m.keys.lock}, value, m.o.ttl.Milliseconds()).Int64()
		return err
	})
	if err != nil {
		return start, err
	}
	if n != 1 {
		return start, fmt.Errorf("key expired or taken over: %w", ErrLockLost)
	}
	return start, nil
}

// release implements grantOps.
func (m *Mutex) release(ctx context.Context, value string) error {
	return m.node.do(ctx, m.keys.lock, m.o.nodeTimeout, func(ctx context.Context, c goredis.UniversalClient) error {
		return m.releaseOn(ctx, c, value)
	})
}

func (m *Mutex) releaseOn(ctx context.Context, c goredis.Scripter, value string) error {
	n, err := releaseOneScript.Run(ctx, c, []string{m.keys.lock, m.keys.waiters}, value, m.keys.wake, wakeTries).Int64()
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("key expired or taken over: %w", ErrLockLost)
	}
	return nil
}
