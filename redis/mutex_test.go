package redis_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/redis"
)

func newMutex(t *testing.T, c goredis.UniversalClient, name string, opts ...redis.Option) *redis.Mutex {
	t.Helper()
	m, err := redis.New(c, name, opts...)
	require.NoError(t, err)
	return m
}

// waitDone waits, bounded, for h.Done.
func waitDone(t *testing.T, h lock.Held) {
	t.Helper()
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Done did not close")
	}
}

func TestNewBadInput(t *testing.T) {
	t.Parallel()
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}) // never dialled
	t.Cleanup(func() { _ = c.Close() })
	clients := []goredis.UniversalClient{c, goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:2", ContextTimeoutEnabled: true}), goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:3", ContextTimeoutEnabled: true})}
	for _, cl := range clients[1:] {
		t.Cleanup(func() { _ = cl.Close() })
	}
	for _, tc := range []struct {
		what  string
		err   error
		field string
		call  func() error
	}{
		{"nil client", redis.ErrInvalidOption, "client", func() error { _, err := redis.New(nil, "x"); return err }},
		{"empty name", lock.ErrInvalidName, "empty", func() error { _, err := redis.New(c, ""); return err }},
		{"ttl 0", redis.ErrInvalidOption, "ttl", func() error { _, err := redis.New(c, "x", redis.WithTTL(0)); return err }},
		{"ttl under drift", redis.ErrInvalidOption, "ttl", func() error { _, err := redis.New(c, "x", redis.WithTTL(time.Millisecond)); return err }},
		{"ttl under the floor", redis.ErrInvalidOption, "ttl 999ms is below the minimum 1s", func() error {
			_, err := redis.New(c, "x", redis.WithTTL(redis.MinTTL-time.Millisecond))
			return err
		}},
		{"prefix", redis.ErrInvalidOption, "prefix", func() error { _, err := redis.New(c, "x", redis.WithPrefix("a{")); return err }},
		{"empty prefix", redis.ErrInvalidOption, "prefix is empty", func() error { _, err := redis.New(c, "x", redis.WithPrefix("")); return err }},
		{"retry", redis.ErrInvalidOption, "retry max", func() error {
			_, err := redis.New(c, "x", redis.WithRetry(time.Second, time.Millisecond))
			return err
		}},
		{"retry min", redis.ErrInvalidOption, "retry min", func() error { _, err := redis.New(c, "x", redis.WithRetry(0, time.Second)); return err }},
		{"max hold", redis.ErrInvalidOption, "max hold", func() error { _, err := redis.New(c, "x", redis.WithAutoExtend(-1)); return err }},
		{"owner", redis.ErrInvalidOption, "owner", func() error { _, err := redis.New(c, "x", redis.WithOwner("a b")); return err }},
		{"replicas", redis.ErrInvalidOption, "replicas", func() error { _, err := redis.New(c, "x", redis.WithReplicas(-1, 0)); return err }},
		{"nil clients", redis.ErrInvalidOption, "clients", func() error { _, err := redis.NewRedlock(nil, "x"); return err }},
		{"2 clients", redis.ErrInvalidOption, "at least 3", func() error { _, err := redis.NewRedlock(clients[:2], "x"); return err }},
		{"nil node", redis.ErrInvalidOption, "clients[1]", func() error {
			_, err := redis.NewRedlock([]goredis.UniversalClient{c, nil, clients[2]}, "x")
			return err
		}},
		{"same address", redis.ErrInvalidOption, "127.0.0.1:1", func() error {
			dup := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
			defer dup.Close()
			_, err := redis.NewRedlock([]goredis.UniversalClient{c, clients[1], dup}, "x")
			return err
		}},
		{"redlock ttl", redis.ErrInvalidOption, "drift allowance", func() error { _, err := redis.NewRedlock(clients, "x", redis.WithTTL(2*time.Millisecond)); return err }},
		{"redlock node timeout", redis.ErrInvalidOption, "node timeout", func() error {
			_, err := redis.NewRedlock(clients, "x", redis.WithNodeTimeout(0))
			return err
		}},
		{"redlock replicas", redis.ErrInvalidOption, "replicas", func() error { _, err := redis.NewRedlock(clients, "x", redis.WithReplicas(1, 0)); return err }},
		{"redlock bad name", lock.ErrInvalidName, "../x", func() error { _, err := redis.NewRedlock(clients, "../x"); return err }},
	} {
		err := tc.call()
		if assert.ErrorIs(t, err, tc.err, tc.what) {
			assert.Contains(t, err.Error(), tc.field, "%s: the error names the field", tc.what)
			assert.True(t, strings.HasPrefix(err.Error(), "redis: "), "%s: %q is prefixed", tc.what, err)
		}
	}
	// Options errors also match the backend-neutral sentinel.
	_, err := redis.New(c, "x", redis.WithTTL(-1))
	assert.ErrorIs(t, err, lock.ErrInvalidOption)
}

// TestTokenAndKeys: tokens grow by one per grant, the counter survives
// releases, keys share one hash tag, and nothing but the counter remains.
func TestTokenAndKeys(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := redistest.Start(t)
	admin := s.Client(t)
	m := newMutex(t, s.Client(t), "orders/eu", redis.WithPrefix("app:"))
	var last uint64
	for i := range 3 {
		h, err := m.Lock(ctx)
		require.NoError(t, err)
		tok := h.Token()
		assert.Equal(t, "orders/eu", tok.Name)
		if i > 0 {
			assert.Equal(t, last+1, tok.Seq)
		}
		last = tok.Seq
		v, err := admin.Get(ctx, "app:{orders/eu}").Result()
		require.NoError(t, err, "the lock key uses the prefix and a hash tag")
		assert.Len(t, v, 32, "the value is 128 random bits in hex")
		require.NoError(t, h.Unlock(ctx))
	}
	keys, err := admin.Keys(ctx, "*").Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"app:{orders/eu}:seq"}, keys, "only the counter remains")
	seq, err := admin.Get(ctx, "app:{orders/eu}:seq").Uint64()
	require.NoError(t, err)
	assert.Equal(t, last, seq)
}

// TestDeadline: without extension Done closes at the local deadline, before
// the server expires the key; Extend and Unlock then report the loss, and
// Extend does not re-create the key.
func TestDeadline(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := redistest.Start(t)
	admin := s.Client(t)
	m := newMutex(t, s.Client(t), "short", redis.WithTTL(redis.MinTTL))
	h, err := m.Lock(ctx)
	require.NoError(t, err)
	g := h.(*redis.Grant)
	waitDone(t, g)
	assert.ErrorIs(t, g.Err(), lock.ErrLockLost)
	assert.ErrorIs(t, g.Extend(ctx), lock.ErrLockLost, "Extend after the deadline")

	// Let the server expire the key, then check Extend did not revive it.
	other := newMutex(t, s.Client(t), "short", redis.WithTTL(5*time.Second))
	h2, err := other.Lock(ctx)
	require.NoError(t, err, "the next holder gets the lock once the key expires")
	assert.ErrorIs(t, g.Extend(ctx), lock.ErrLockLost)
	assert.ErrorIs(t, g.Unlock(ctx), lock.ErrLockLost, "Unlock after expiry")
	_, err = newMutex(t, admin, "short").TryLock(ctx)
	assert.ErrorIs(t, err, lock.ErrLocked, "the expired grant's Unlock must not release the next holder")
	assert.NoError(t, h2.Unlock(ctx))
}

// TestExtend moves the deadline, and reports loss when the key is gone.
func TestExtend(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := redistest.Start(t)
	m := newMutex(t, s.Client(t), "ext", redis.WithTTL(5*time.Second))
	h, err := m.Lock(ctx)
	require.NoError(t, err)
	g := h.(*redis.Grant)
	before := g.Deadline()
	require.NoError(t, g.Extend(ctx))
	assert.True(t, g.Deadline().After(before))
	pttl, err := s.Client(t).PTTL(ctx, redis.DefaultPrefix+"{ext}").Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, time.Duration(0))

	require.NoError(t, s.Client(t).Del(ctx, redis.DefaultPrefix+"{ext}").Err())
	assert.ErrorIs(t, g.Extend(ctx), lock.ErrLockLost, "Extend after the key was deleted")
	waitDone(t, g)
	n, err := s.Client(t).Exists(ctx, redis.DefaultPrefix+"{ext}").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "Extend must not re-acquire")
	assert.ErrorIs(t, g.Unlock(ctx), lock.ErrLockLost)
}

// TestAutoExtendMaxHold: the watchdog stops at the maximum hold, and the
// grant then ends at its deadline.
func TestAutoExtendMaxHold(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := redistest.Start(t)
	m := newMutex(t, s.Client(t), "maxhold", redis.WithTTL(redis.MinTTL), redis.WithAutoExtend(400*time.Millisecond))
	h, err := m.Lock(ctx)
	require.NoError(t, err)
	waitDone(t, h)
	assert.ErrorIs(t, h.(*redis.Grant).Err(), lock.ErrLockLost)
	assert.ErrorIs(t, h.Unlock(ctx), lock.ErrLockLost)
}

// TestAutoExtendDetectsLoss: the watchdog (every TTL/3 = 2s) notices a
// deleted key well before the deadline (6s): Err comes from its Extend.
func TestAutoExtendDetectsLoss(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := redistest.Start(t)
	m := newMutex(t, s.Client(t), "watch", redis.WithTTL(6*time.Second), redis.WithAutoExtend(0))
	h, err := m.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Client(t).Del(ctx, redis.DefaultPrefix+"{watch}").Err())
	waitDone(t, h)
	err = h.(*redis.Grant).Err()
	assert.ErrorIs(t, err, lock.ErrLockLost)
	assert.Contains(t, err.Error(), "extend", "the watchdog's Extend found the loss")
	assert.ErrorIs(t, h.Unlock(ctx), lock.ErrLockLost)
}

// TestOwner: the owner is stored in the lock key, after the grant's
// random value and a space, for operators to read.
func TestOwner(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := redistest.Start(t)
	m := newMutex(t, s.Client(t), "owned", redis.WithOwner("host-1/pid-42"))
	h, err := m.Lock(ctx)
	require.NoError(t, err)
	v, err := s.Client(t).Get(ctx, redis.DefaultPrefix+"{owned}").Result()
	require.NoError(t, err)
	random, owner, ok := strings.Cut(v, " ")
	require.True(t, ok, "%q has an owner part", v)
	assert.Len(t, random, 32)
	assert.Equal(t, "host-1/pid-42", owner)
	require.NoError(t, h.Unlock(ctx))
}

// TestReplicas: a grant counts only once WAIT saw enough replicas; a grant
// that did not is released.
func TestReplicas(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// No diskless-sync delay, so the replica links up at once.
	master := redistest.Start(t, redistest.WithArgs("--repl-diskless-sync-delay", "0"))
	replica := redistest.Start(t, redistest.WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(master.Port())))
	waitReplicaUp(ctx, t, replica.Client(t))

	m := newMutex(t, master.Client(t), "repl", redis.WithReplicas(1, 5*time.Second))
	h, err := m.TryLock(ctx)
	require.NoError(t, err, "one replica acknowledges")
	require.NoError(t, h.Unlock(ctx))

	m2 := newMutex(t, master.Client(t), "repl", redis.WithReplicas(2, 50*time.Millisecond))
	_, err = m2.TryLock(ctx)
	assert.ErrorIs(t, err, redis.ErrNotReplicated, "only one replica exists")
	n, err := master.Client(t).Exists(ctx, redis.DefaultPrefix+"{repl}").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "an unacknowledged grant is released")
}

// waitReplicaUp waits (bounded by ctx) for the replica's link to its master.
func waitReplicaUp(ctx context.Context, t *testing.T, c goredis.UniversalClient) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return
		}
		select {
		case <-ctx.Done():
			require.FailNow(t, "replica link not up", "last: %v %s", err, info)
		case <-tick.C:
		}
	}
}

// TestCancelLeavesNoKey: a Lock cancelled while waiting leaves no key, and
// the holder's release wakes a waiter.
func TestCancelLeavesNoKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := redistest.Start(t)
	admin := s.Client(t)
	holder := newMutex(t, s.Client(t), "cancel")
	h, err := holder.Lock(ctx)
	require.NoError(t, err)
	before, err := admin.Get(ctx, redis.DefaultPrefix+"{cancel}").Result()
	require.NoError(t, err)

	cctx, ccancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer ccancel()
	_, err = newMutex(t, s.Client(t), "cancel").Lock(cctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	after, err := admin.Get(ctx, redis.DefaultPrefix+"{cancel}").Result()
	require.NoError(t, err)
	assert.Equal(t, before, after, "the holder's key is untouched")

	waiter := newMutex(t, s.Client(t), "cancel")
	got := make(chan error, 1)
	go func() {
		h2, err := waiter.Lock(ctx)
		if err == nil {
			err = h2.Unlock(ctx)
		}
		got <- err
	}()
	require.NoError(t, h.Unlock(ctx))
	select {
	case err := <-got:
		assert.NoError(t, err, "the waiter gets the lock after Unlock")
	case <-time.After(10 * time.Second):
		require.FailNow(t, "waiter not granted")
	}
}
