package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/lock/locktest"
	"github.com/dlock-go/dlock/redis"
)

// testTTL is short so that DoneOnLoss sees the local deadline quickly, and
// long enough that no holder in the suite outlives it.
const testTTL = 2 * time.Second

// deleteKey deletes the lock key of h on every client, behind its back.
func deleteKey(t *testing.T, clients []goredis.UniversalClient, h lock.Held) {
	t.Helper()
	key := redis.DefaultPrefix + "{" + h.Token().Name + "}"
	for _, c := range clients {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := c.Del(ctx, key).Err()
		cancel()
		if err != nil {
			t.Logf("delete %s: %v (node down?)", key, err)
		}
	}
}

func mutexBackend(t *testing.T, opts ...redis.Option) locktest.Backend {
	s := redistest.Start(t)
	return clientBackend(t, s.Client(t), s.Client, opts...)
}

// clientBackend runs the Mutex on clients made by newClient (one per
// Locker); admin deletes keys behind the holders' backs.
func clientBackend(t *testing.T, admin goredis.UniversalClient, newClient func(testing.TB) goredis.UniversalClient, opts ...redis.Option) locktest.Backend {
	opts = append([]redis.Option{redis.WithTTL(testTTL)}, opts...)
	return locktest.Backend{
		New: func(t *testing.T, name string) lock.Locker {
			m, err := redis.New(newClient(t), name, opts...)
			require.NoError(t, err)
			drainAtEnd(t)
			return m
		},
		Lose: func(t *testing.T, h lock.Held) {
			deleteKey(t, []goredis.UniversalClient{admin}, h)
		},
		Construct: func(name string) error {
			_, err := redis.New(admin, name, opts...)
			return err
		},
		Bad: map[string]func() error{
			"nil client":       func() error { _, err := redis.New(nil, "x"); return err },
			"typed nil client": func() error { _, err := redis.New((*goredis.Client)(nil), "x"); return err },
			"ttl 0":            func() error { _, err := redis.New(admin, "x", redis.WithTTL(0)); return err },
			"negative ttl":     func() error { _, err := redis.New(admin, "x", redis.WithTTL(-time.Second)); return err },
			"nil option":       func() error { _, err := redis.New(admin, "x", nil); return err },
			"owner with space": func() error { _, err := redis.New(admin, "x", redis.WithOwner("a b")); return err },
		},
		Timeout: 20 * time.Second,
	}
}

func TestConformanceMutex(t *testing.T) {
	t.Parallel()
	locktest.Run(t, mutexBackend(t))
}

func TestConformanceMutexAutoExtend(t *testing.T) {
	t.Parallel()
	locktest.Run(t, mutexBackend(t, redis.WithAutoExtend(0)))
}

// TestConformanceMutexDefaultClient: clients built with go-redis' default
// options (ContextTimeoutEnabled false), as most applications build them.
func TestConformanceMutexDefaultClient(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	locktest.Run(t, clientBackend(t, s.Client(t), s.DefaultClient))
}

// TestConformanceMutexSentinel: the Mutex on a goredis.NewFailoverClient,
// which finds the master through three sentinels.
func TestConformanceMutexSentinel(t *testing.T) {
	t.Parallel()
	st := redistest.StartSentinel(t)
	locktest.Run(t, clientBackend(t, st.Client(t), st.Client))
}

// TestConformanceMutexCluster: the Mutex on a goredis.NewClusterClient over
// a 3-master cluster; the hash tag keeps a lock's keys in one slot.
func TestConformanceMutexCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	locktest.Run(t, clientBackend(t, cl.Client(t), cl.Client))
}

func redlockBackend(t *testing.T, servers []*redistest.Server, opts ...redis.Option) locktest.Backend {
	return redlockClientsBackend(t, servers, func(t *testing.T) []goredis.UniversalClient { return redistest.Clients(t, servers) }, opts...)
}

func redlockClientsBackend(t *testing.T, servers []*redistest.Server, newClients func(t *testing.T) []goredis.UniversalClient, opts ...redis.Option) locktest.Backend {
	admin := redistest.Clients(t, servers)
	opts = append([]redis.Option{redis.WithTTL(testTTL)}, opts...)
	return locktest.Backend{
		New: func(t *testing.T, name string) lock.Locker {
			r, err := redis.NewRedlock(newClients(t), name, opts...)
			require.NoError(t, err)
			drainAtEnd(t)
			return r
		},
		Lose: func(t *testing.T, h lock.Held) { deleteKey(t, admin, h) },
		Construct: func(name string) error {
			_, err := redis.NewRedlock(admin, name, opts...)
			return err
		},
		Bad: map[string]func() error{
			"nil clients":   func() error { _, err := redis.NewRedlock(nil, "x"); return err },
			"empty clients": func() error { _, err := redis.NewRedlock([]goredis.UniversalClient{}, "x"); return err },
			"two clients":   func() error { _, err := redis.NewRedlock(admin[:2], "x"); return err },
			"a nil client": func() error {
				_, err := redis.NewRedlock([]goredis.UniversalClient{admin[0], nil, admin[2]}, "x")
				return err
			},
			"same client twice": func() error {
				_, err := redis.NewRedlock([]goredis.UniversalClient{admin[0], admin[1], admin[0]}, "x")
				return err
			},
			"ttl 0":            func() error { _, err := redis.NewRedlock(admin, "x", redis.WithTTL(0)); return err },
			"ttl within drift": func() error { _, err := redis.NewRedlock(admin, "x", redis.WithTTL(2*time.Millisecond)); return err },
			"node timeout > ttl": func() error {
				_, err := redis.NewRedlock(admin, "x", redis.WithTTL(time.Second), redis.WithNodeTimeout(2*time.Second))
				return err
			},
		},
		Timeout: 20 * time.Second,
	}
}

func TestConformanceRedlock(t *testing.T) {
	t.Parallel()
	locktest.Run(t, redlockBackend(t, redistest.StartN(t, 5)))
}

// TestConformanceRedlockDefaultClients: nodes reached through clients with
// go-redis' default options (ContextTimeoutEnabled false).
func TestConformanceRedlockDefaultClients(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 5)
	locktest.Run(t, redlockClientsBackend(t, servers, func(t *testing.T) []goredis.UniversalClient { return defaultClients(t, servers) }))
}

// TestConformanceRedlockTwoDown runs the whole suite with 2 of 5 nodes
// killed: exclusion and everything else still hold on the majority.
func TestConformanceRedlockTwoDown(t *testing.T) {
	t.Parallel()
	servers := redistest.StartN(t, 5)
	servers[1].Kill()
	servers[3].Kill()
	locktest.Run(t, redlockBackend(t, servers))
}
