//go:build dlock_faults

package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/internal/fault"
	"github.com/dlock-go/dlock/internal/fault/faulttest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/redis"
)

// Under DLOCK_CLOCK_RATE=r a grant's local validity (TTL − drift
// allowance) passes in validity/r of real time. With a slow clock (r < 1)
// the key expires on the server and another holder is granted while the
// first grant's Done is still open; with a fast one, Done closes while the
// key is still there. For a Mutex and a Redlock.
func TestFaultClockRateMovesDone(t *testing.T) {
	const ttl = time.Second
	validity := ttl - (ttl/100 + 2*time.Millisecond) // the drift allowance: 1% + 2ms
	backends := []struct {
		name string
		new  func(t *testing.T) (lock.Locker, lock.Locker) // two lockers of one lock
	}{
		{"mutex", func(t *testing.T) (lock.Locker, lock.Locker) {
			s := redistest.Start(t)
			return newMutex(t, s.Client(t), "rate", redis.WithTTL(ttl)), newMutex(t, s.Client(t), "rate", redis.WithTTL(ttl))
		}},
		{"redlock", func(t *testing.T) (lock.Locker, lock.Locker) {
			servers := redistest.StartN(t, 3)
			var ls [2]lock.Locker
			for i := range ls {
				r, err := redis.NewRedlock(redistest.Clients(t, servers), "rate", redis.WithTTL(ttl))
				require.NoError(t, err)
				ls[i] = r
			}
			drainAtEnd(t)
			return ls[0], ls[1]
		}},
	}
	for _, b := range backends {
		for _, tc := range []struct {
			env string
			r   float64
		}{{"0.25", 0.25}, {"4", 4}} {
			t.Run(b.name+"/rate "+tc.env, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				defer cancel()
				faulttest.Set(t, tc.env, "")
				first, second := b.new(t)
				before := time.Now()
				h, err := first.TryLock(ctx)
				require.NoError(t, err)
				after := time.Now()
				g := h.(*redis.Grant)
				realValidity := time.Duration(float64(validity) / tc.r) // the validity in real time
				assert.WithinRange(t, fault.Real(g.Deadline()), before.Add(realValidity), after.Add(realValidity), "the deadline in real time")

				if tc.r < 1 {
					// Granted once the key expires on the server, about
					// one TTL in, while the first grant looks valid.
					h2, err := second.Lock(ctx)
					require.NoError(t, err)
					select {
					case <-g.Done():
						t.Fatalf("Done closed before the server expired the key (%v after the grant)", time.Since(before))
					default:
					}
					assert.True(t, time.Now().After(before.Add(ttl)), "real time is past the TTL")
					waitDone(t, g)
					assert.False(t, time.Now().Before(before.Add(realValidity)), "Done closed %v after the grant", time.Since(before))
					assert.ErrorIs(t, h2.Unlock(ctx), lock.ErrLockLost, "the second grant's key expired too, under its open Done")
				} else {
					waitDone(t, g)
					closed := time.Since(before)
					assert.GreaterOrEqual(t, closed, realValidity)
					assert.Less(t, closed, validity, "earlier than the real clock's deadline")
					_, err := second.TryLock(ctx)
					assert.ErrorIs(t, err, lock.ErrLocked, "the key is still on the server: a fast clock only errs toward a gap")
				}
				assert.ErrorIs(t, g.Err(), lock.ErrLockLost)
				_ = g.Unlock(ctx)
			})
		}
	}
}
