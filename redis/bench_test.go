package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/redis"
	"github.com/dlock-go/dlock/session"
)

// A benchBackend returns a new, independent Locker handle (its own client)
// for the lock called name; calls with the same name contend for one lock,
// as with locktest.Backend.New.
type benchBackend func(b *testing.B, name string) lock.Locker

// benchBackends maps a backend's name to a function that starts its servers
// for one benchmark and returns the backend: the etcd Mutex, single Redis
// and Redlock(5), measured in one run on one machine.
var benchBackends = map[string]func(b *testing.B) benchBackend{
	"etcd": func(b *testing.B) benchBackend {
		c := etcdtest.New(b)
		return func(b *testing.B, name string) lock.Locker {
			s, err := session.New(b.Context(), c.Client(b))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close(context.Background()) })
			m, err := lock.New(s, name)
			if err != nil {
				b.Fatal(err)
			}
			return m
		}
	},
	"redis": func(b *testing.B) benchBackend {
		s := redistest.Start(b)
		return func(b *testing.B, name string) lock.Locker {
			m, err := redis.New(s.Client(b), name)
			if err != nil {
				b.Fatal(err)
			}
			return m
		}
	},
	"redlock5": func(b *testing.B) benchBackend {
		servers := redistest.StartN(b, 5)
		return func(b *testing.B, name string) lock.Locker {
			r, err := redis.NewRedlock(redistest.Clients(b, servers), name)
			if err != nil {
				b.Fatal(err)
			}
			return r
		}
	},
}

// BenchmarkLockUnlock: an uncontended Lock followed by Unlock.
func BenchmarkLockUnlock(b *testing.B) {
	for name, start := range benchBackends {
		b.Run(name, func(b *testing.B) { benchLockUnlock(b, start(b)) })
	}
}

// BenchmarkHandoff: the time from a holder's Unlock to the grant of a
// waiter that was already waiting, reported as ns/handoff. ns/op is the
// whole round (waiter start, settle, handoff) and is not the figure to read.
func BenchmarkHandoff(b *testing.B) {
	for name, start := range benchBackends {
		b.Run(name, func(b *testing.B) { benchHandoff(b, start(b)) })
	}
}

func benchLockUnlock(b *testing.B, nb benchBackend) {
	ctx := b.Context()
	l := nb(b, "bench/lock-unlock")
	for b.Loop() {
		h, err := l.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// settle is how long a new waiter is given to make its first attempt and
// start waiting (subscribe) before the holder unlocks. It lies outside the
// measured handoff.
const settle = 5 * time.Millisecond

// benchHandoff passes the lock back and forth between two handles: each
// round starts a waiter on the handle that does not hold the lock, lets it
// settle, unlocks the holder and measures until the waiter is granted.
func benchHandoff(b *testing.B, nb benchBackend) {
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	handles := [2]lock.Locker{nb(b, "bench/handoff"), nb(b, "bench/handoff")}
	held, err := handles[0].Lock(ctx)
	if err != nil {
		b.Fatal(err)
	}
	type grant struct {
		h   lock.Held
		at  time.Time
		err error
	}
	var total time.Duration
	var n int
	for i := 0; b.Loop(); i++ {
		waiter := handles[(i+1)%2]
		got := make(chan grant, 1)
		go func() {
			h, err := waiter.Lock(ctx)
			got <- grant{h, time.Now(), err}
		}()
		time.Sleep(settle)
		released := time.Now()
		if err := held.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		g := <-got
		if g.err != nil {
			b.Fatal(g.err)
		}
		total += g.at.Sub(released)
		n++
		held = g.h
	}
	if err := held.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(n), "ns/handoff")
}
