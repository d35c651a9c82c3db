package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/cleanup"
	"github.com/dlock-go/dlock/internal/errs"
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
// missed the last INCRs). Capabilities().SurvivesFailover is false.
//
// A Mutex is a handle, safe for concurrent use: several goroutines may lock
// through it, each getting its own grant. The zero value is not usable; call
// New.
type Mutex struct {
	client goredis.UniversalClient
	name   string
	keys   keys
	o      options
	tel    *obs.T
	tasks  tasks // stragglers: see Drain
	// capped: the client honours ctx deadlines, so commands run in the
	// caller's goroutine with their deadline capped (see call).
	capped bool
}

var _ lock.Locker = (*Mutex)(nil)

// New returns a Mutex for the lock called name on client. It validates name
// with lock.ValidateName (errors match ErrInvalidName) and the options
// (errors match ErrInvalidOption and name the field). It does not contact
// the server.
func New(client goredis.UniversalClient, name string, opts ...Option) (*Mutex, error) {
	if isNil(client) {
		return nil, fmt.Errorf("%w: client is nil", ErrInvalidOption)
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
	return &Mutex{client: client, name: name, keys: newKeys(o.prefix, name), o: o, tel: obs.New(o.tel, "redis"), capped: honoursDeadlines(client)}, nil
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.name }

// LockKey returns "redis:" and the lock's key: its place in lock.LockAll's
// order.
func (m *Mutex) LockKey() string { return "redis:" + m.keys.lock }

// Capabilities reports what a Mutex guarantees: fencing tokens (monotonic
// while the node's data lives), no FIFO order, TTL liveness, and no
// survival of a failover (replication is asynchronous).
func (m *Mutex) Capabilities() lock.Capabilities {
	return lock.Capabilities{
		Exclusive:        true,
		FencingTokens:    true,
		FIFO:             false,
		Liveness:         lock.LivenessTTL,
		SurvivesFailover: false,
	}
}

// Lock waits until the lock is granted or ctx ends. A waiter is woken by the
// holder's release notification and otherwise polls with jittered backoff,
// never later than the holder's TTL; waiters are not served in order. When
// ctx ends it returns promptly (within the node timeout), even while a
// command is outstanding on a stalled node, with an error matching
// ctx.Err(), and leaves no key behind: a command that may still land is
// followed by a compare-and-delete when it completes (see Drain). Errors
// other than contention (a node down) are retried until ctx ends; the last
// one is quoted in the returned error. The lock.Held is a *Grant.
func (m *Mutex) Lock(ctx context.Context) (lock.Held, error) {
	return observe(ctx, m.tel, m.name, "lock", func(ctx context.Context) (*Grant, bool, error) {
		return acquire(ctx, m, m.name, &m.o)
	})
}

// TryLock makes one attempt: it returns an error matching ErrLocked (and
// lock.ErrLocked) at once if another grant holds the lock. Like Lock, it
// returns when ctx ends (within the node timeout) even if the node has not
// answered. The lock.Held is a *Grant.
func (m *Mutex) TryLock(ctx context.Context) (lock.Held, error) {
	return observe(ctx, m.tel, m.name, "try lock", func(ctx context.Context) (*Grant, bool, error) {
		if err := ctx.Err(); err != nil {
			return nil, false, errs.New("redis", m.name, "try lock", err)
		}
		g, _, err := m.attempt(ctx, "try lock", "")
		return g, false, err
	})
}

// Owner returns the owner stored (WithOwner) by the current holder, and
// whether the lock is held at all.
func (m *Mutex) Owner(ctx context.Context) (owner string, held bool, err error) {
	v, err, _ := call(ctx, &m.tasks, m.o.nodeTimeout, m.capped, func(ctx context.Context) (string, error) { return m.client.Get(ctx, m.keys.lock).Result() }, nil)
	if errors.Is(err, goredis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, errs.New("redis", m.name, "owner", err)
	}
	return ownerOf(v), true, nil
}

// Drain waits until the background work of earlier calls on m has ended,
// or ctx ends (then it returns ctx's error). That work is the stragglers:
// commands whose caller's ctx ended before the node answered, and the
// compare-and-delete that follows one that may have granted. Each ends
// when the node answers or the client's own timeouts pass (see the package
// documentation, "Stragglers"). Call Drain before closing the client, so
// that those cleanups can still reach the node. m stays usable during and
// after Drain. When Drain returns, no goroutine of m's is left: it also
// ends the workers that stay warm for m's next call (on a client with
// go-redis' default options each command runs in one, as does a waiter's
// subscription; they exit on their own 100 ms after their last task).
func (m *Mutex) Drain(ctx context.Context) error { return m.tasks.wait(ctx) }

// acquireReply is the acquire script's answer.
type acquireReply struct {
	granted bool
	n       int64 // the token if granted, else the holder's remaining validity (ms)
}

func (m *Mutex) attempt(ctx context.Context, op, wid string) (*Grant, time.Duration, error) {
	value := newValue(m.o.owner)
	start := time.Now()
	// WAIT may take longer than the node timeout: with replicas the
	// acquire is not capped.
	r, err, ok := call(ctx, &m.tasks, m.o.nodeTimeout, m.capped && m.o.replicas == 0, func(ctx context.Context) (acquireReply, error) { return m.grant(ctx, value, wid) },
		func(r acquireReply, err error) {
			// The caller gave up on this attempt: undo it if it may have
			// granted.
			if err != nil || r.granted {
				m.releaseDetached(ctx, value)
			}
		})
	if !ok {
		return nil, 0, errs.New("redis", m.name, op, err)
	}
	if err != nil {
		// The script may have run although we saw no reply (a timeout):
		// delete what may be ours.
		m.cleanup(ctx, value)
		return nil, 0, errs.New("redis", m.name, op, err)
	}
	if !r.granted {
		return nil, time.Duration(r.n) * time.Millisecond, errs.New("redis", m.name, op, ErrLocked)
	}
	if cerr := ctx.Err(); cerr != nil {
		// Granted after the caller's ctx ended: give it back.
		m.cleanup(ctx, value)
		return nil, 0, errs.New("redis", m.name, op, cerr)
	}
	if !time.Now().Before(start.Add(m.o.ttl - m.o.driftAllowance())) {
		m.cleanup(ctx, value)
		return nil, 0, errs.New("redis", m.name, op, fmt.Errorf("no validity left after the acquire round trip (ttl %v)", m.o.ttl))
	}
	return newGrant(m.name, uint64(r.n), value, m, &m.o, start, m.tel), 0, nil
}

// cleanup deletes the grant value if it is still there, with a detached
// bounded context; it returns when that is done, or at most the node
// timeout after ctx ended (the delete then finishes in the background).
// On a capped client (when ctx can end) it waits at most the node timeout
// from now, as its commands do.
func (m *Mutex) cleanup(ctx context.Context, value string) {
	wait := ctx
	if m.capped && ctx.Done() != nil {
		var cancel context.CancelFunc
		wait, cancel = context.WithDeadline(ctx, time.Now())
		defer cancel()
	}
	// Not capped itself: the delete goes on in the background if need be.
	_, _, _ = call(wait, &m.tasks, m.o.nodeTimeout, false, func(context.Context) (struct{}, error) {
		m.releaseDetached(ctx, value)
		return struct{}{}, nil
	}, nil)
}

// releaseDetached deletes the grant value if it is still there (and wakes
// a waiter if it was), with a detached bounded context.
func (m *Mutex) releaseDetached(ctx context.Context, value string) {
	cctx, cancel := cleanup.Context(ctx)
	defer cancel()
	_ = m.releaseOn(cctx, m.client, value)
}

// grant runs the acquire script (and WAIT, if asked) as waiter wid.
func (m *Mutex) grant(ctx context.Context, value, wid string) (acquireReply, error) {
	if m.o.replicas == 0 {
		return m.runAcquire(ctx, m.client, value, wid)
	}
	// WAIT counts the writes of its own connection: run both on one.
	var c *goredis.Client
	switch cl := m.client.(type) {
	case *goredis.Client:
		c = cl
	case *goredis.ClusterClient:
		var err error
		if c, err = cl.MasterForKey(ctx, m.keys.lock); err != nil {
			return acquireReply{}, err
		}
	}
	conn := c.Conn()
	defer conn.Close()
	r, err := m.runAcquire(ctx, conn, value, wid)
	if err != nil || !r.granted {
		return r, err
	}
	acks, err := conn.Wait(ctx, m.o.replicas, m.o.replicaTimeout).Result()
	if err != nil {
		return r, fmt.Errorf("wait for replicas: %w", err)
	}
	if acks < int64(m.o.replicas) {
		return r, fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, acks, m.o.replicas, m.o.replicaTimeout)
	}
	return r, nil
}

// runAcquire runs the acquire script; a waiter (wid not "") is
// registered if refused, and leaves the waiters if granted.
func (m *Mutex) runAcquire(ctx context.Context, c goredis.Scripter, value, wid string) (acquireReply, error) {
	args := []any{value, m.o.ttl.Milliseconds(), "1"}
	if wid != "" {
		args = append(args, wid, m.waitersTTL().Milliseconds())
	}
	res, err := acquireScript.Run(ctx, c, []string{m.keys.lock, m.keys.seq, m.keys.waiters}, args...).Int64Slice()
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
	return subscribe(ctx, &m.tasks, []goredis.UniversalClient{m.client}, m.keys.wake+wid, 1, m.o.nodeTimeout)
}

// leave implements attempter: waiter wid, which gives up, leaves the
// waiters in the background (a detached, bounded call); if the lock is
// free then, the next waiter is woken, in case wid had taken the wake-up.
// Were the call lost, the next release would skip wid (nobody listens on
// its channel) and the waiters key expires on its own.
func (m *Mutex) leave(ctx context.Context, wid string) {
	m.tasks.goTask(func() {
		cctx, cancel := cleanup.Context(ctx)
		defer cancel()
		_ = leaveScript.Run(cctx, m.client, []string{m.keys.lock, m.keys.waiters}, wid, m.keys.wake, wakeTries).Err()
	})
}

// extend implements grantOps.
func (m *Mutex) extend(ctx context.Context, value string) (time.Time, error) {
	start := time.Now()
	n, err, _ := call(ctx, &m.tasks, m.o.nodeTimeout, m.capped, func(ctx context.Context) (int64, error) {
		return extendScript.Run(ctx, m.client, []string{m.keys.lock}, value, m.o.ttl.Milliseconds()).Int64()
	}, nil)
	if err != nil {
		return start, err
	}
	if n != 1 {
		return start, fmt.Errorf("key expired or taken over: %w", ErrLockLost)
	}
	return start, nil
}

// release implements grantOps.
func (m *Mutex) release(ctx context.Context, value string, late func(error)) error {
	_, err, _ := call(ctx, &m.tasks, m.o.nodeTimeout, m.capped, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, m.releaseOn(ctx, m.client, value)
	}, func(_ struct{}, err error) { late(err) })
	return err
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

// honoursDeadlines reports whether c is a go-redis client built with
// ContextTimeoutEnabled, which bounds reads and writes by ctx's deadline.
func honoursDeadlines(c goredis.UniversalClient) bool {
	switch cl := c.(type) {
	case *goredis.Client:
		return cl.Options().ContextTimeoutEnabled
	case *goredis.ClusterClient:
		return cl.Options().ContextTimeoutEnabled
	case *goredis.Ring:
		return cl.Options().ContextTimeoutEnabled
	}
	return false
}

// isNil reports whether c is nil or a typed nil of a known client type.
func isNil(c goredis.UniversalClient) bool {
	switch cl := c.(type) {
	case nil:
		return true
	case *goredis.Client:
		return cl == nil
	case *goredis.ClusterClient:
		return cl == nil
	case *goredis.Ring:
		return cl == nil
	}
	return false
}
