package lock_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/lock/locktest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	s := etcdtest.Session(t, cli)
	locktest.Run(t, locktest.Backend{
		New: func(t *testing.T, name string) lock.Locker {
			return newMutex(t, etcdtest.Session(t, cli, fastBeat), name)
		},
		Lose: func(t *testing.T, h lock.Held) {
			_, err := cli.Delete(t.Context(), h.(*lock.Grant).Key())
			require.NoError(t, err)
		},
		Construct: func(name string) error {
			_, err := lock.New(s, name)
			return err
		},
		Bad: map[string]func() error{
			"nil session":  func() error { _, err := lock.New(nil, "x"); return err },
			"empty prefix": func() error { _, err := lock.New(s, "x", lock.WithPrefix("")); return err },
		},
	})
}

func TestConformanceSemaphore(t *testing.T) {
	t.Parallel()
	cli := etcdtest.New(t).Client(t)
	locktest.RunSemaphore(t, locktest.SemaphoreBackend{
		New: func(t *testing.T, name string, permits int) locktest.Semaphore {
			s, err := lock.NewSemaphore(etcdtest.Session(t, cli, fastBeat), name, permits)
			require.NoError(t, err)
			return s
		},
		Lose: func(t *testing.T, h lock.Held) {
			_, err := cli.Delete(t.Context(), h.(*lock.Grant).Key())
			require.NoError(t, err)
		},
	})
}

func TestConformanceRWMutex(t *testing.T) {
	t.Parallel()
	cli := etcdtest.New(t).Client(t)
	newRW := func(t *testing.T, name string) *lock.RWMutex {
		rw, err := lock.NewRWMutex(etcdtest.Session(t, cli, fastBeat), name)
		require.NoError(t, err)
		return rw
	}
	locktest.Run(t, locktest.Backend{
		New: func(t *testing.T, name string) lock.Locker { return newRW(t, name) },
		Lose: func(t *testing.T, h lock.Held) {
			_, err := cli.Delete(t.Context(), h.(*lock.Grant).Key())
			require.NoError(t, err)
		},
	})
	locktest.RunRW(t, locktest.RWBackend{
		New: func(t *testing.T, name string) locktest.RWLocker { return newRW(t, name) },
	})
}
