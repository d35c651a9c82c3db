package redis

import (
	"context"
	"errors"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/cleanup"
	"github.com/dlock-go/dlock/internal/errs"
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
// A Mutex is a handle, safe for concurrent use: several goroutines may lock
// through it, each getting its own grant. The zero value is not usable; call
// New.
type Mutex struct {
	client goredis.UniversalClient
	name   string
	keys   keys
	o      options
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
	return &Mutex{client: client, name: name, keys: newKeys(o.prefix, name), o: o}, nil
}

// Name returns the lock's name.
func (m *Mutex) Name() string { return m.name }

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
// never later than the holder's TTL; waiters are not served in order. On ctx
// end it returns an error matching ctx.Err() and leaves no key behind.
// Errors other than contention (a node down) are retried until ctx ends;
// the last one is quoted in the returned error. The lock.Held is a *Grant.
func (m *Mutex) Lock(ctx context.Context) (lock.Held, error) {
	g, err := acquire(ctx, m, m.name, &m.o, []goredis.UniversalClient{m.client}, m.keys.channel)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// TryLock makes one attempt: it returns an error matching ErrLocked (and
// lock.ErrLocked) at once if another grant holds the lock. The lock.Held is
// a *Grant.
func (m *Mutex) TryLock(ctx context.Context) (lock.Held, error) {
	if err := ctx.Err(); err != nil {
		return nil, errs.New("redis", m.name, "try lock", err)
	}
	g, _, err := m.attempt(ctx)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// Owner returns the owner stored (WithOwner) by the current holder, and
// whether the lock is held at all.
func (m *Mutex) Owner(ctx context.Context) (owner string, held bool, err error) {
	v, err := m.client.Get(ctx, m.keys.lock).Result()
	if errors.Is(err, goredis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, errs.New("redis", m.name, "owner", err)
	}
	return ownerOf(v), true, nil
}

func (m *Mutex) attempt(ctx context.Context) (*Grant, time.Duration, error) {
	value := newValue(m.o.owner)
	start := time.Now()
	granted, n, err := m.grant(ctx, value)
	if err != nil {
		// The script may have run although we saw no reply (a cancel, a
		// timeout): delete what may be ours.
		cctx, cancel := cleanup.Context(ctx)
		_ = m.releaseOn(cctx, m.client, value)
		cancel()
		return nil, 0, errs.New("redis", m.name, "lock", err)
	}
	if !granted {
		return nil, time.Duration(n) * time.Millisecond, errs.New("redis", m.name, "lock", ErrLocked)
	}
	if !time.Now().Before(start.Add(m.o.ttl - m.o.driftAllowance())) {
		cctx, cancel := cleanup.Context(ctx)
		_ = m.releaseOn(cctx, m.client, value)
		cancel()
		return nil, 0, errs.New("redis", m.name, "lock", fmt.Errorf("no validity left after the acquire round trip (ttl %v)", m.o.ttl))
	}
	return newGrant(m.name, uint64(n), value, m, &m.o, start), 0, nil
}

// grant runs the acquire script (and WAIT, if asked). It returns whether
// the lock was granted, and the token if so, else the holder's remaining
// validity in milliseconds.
func (m *Mutex) grant(ctx context.Context, value string) (bool, int64, error) {
	if m.o.replicas == 0 {
		return m.runAcquire(ctx, m.client, value)
	}
	// WAIT counts the writes of its own connection: run both on one.
	var c *goredis.Client
	switch cl := m.client.(type) {
	case *goredis.Client:
		c = cl
	case *goredis.ClusterClient:
		var err error
		if c, err = cl.MasterForKey(ctx, m.keys.lock); err != nil {
			return false, 0, err
		}
	}
	conn := c.Conn()
	defer conn.Close()
	granted, n, err := m.runAcquire(ctx, conn, value)
	if err != nil || !granted {
		return granted, n, err
	}
	acks, err := conn.Wait(ctx, m.o.replicas, m.o.replicaTimeout).Result()
	if err != nil {
		return false, 0, fmt.Errorf("wait for replicas: %w", err)
	}
	if acks < int64(m.o.replicas) {
		return false, 0, fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, acks, m.o.replicas, m.o.replicaTimeout)
	}
	return true, n, nil
}

func (m *Mutex) runAcquire(ctx context.Context, c goredis.Scripter, value string) (bool, int64, error) {
	res, err := acquireScript.Run(ctx, c, []string{m.keys.lock, m.keys.seq}, value, m.o.ttl.Milliseconds(), "1").Int64Slice()
	if err != nil {
		return false, 0, err
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("acquire script returned %v", res)
	}
	return res[0] == 1, res[1], nil
}

// extend implements grantOps.
func (m *Mutex) extend(ctx context.Context, value string) (time.Time, error) {
	start := time.Now()
	n, err := extendScript.Run(ctx, m.client, []string{m.keys.lock}, value, m.o.ttl.Milliseconds()).Int64()
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
	return m.releaseOn(ctx, m.client, value)
}

func (m *Mutex) releaseOn(ctx context.Context, c goredis.Scripter, value string) error {
	n, err := releaseScript.Run(ctx, c, []string{m.keys.lock}, value, m.keys.channel).Int64()
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("key expired or taken over: %w", ErrLockLost)
	}
	return nil
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
