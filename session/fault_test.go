//go:build dlock_faults

package session_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/internal/attach"
	"github.com/dlock-go/dlock/internal/fault"
	"github.com/dlock-go/dlock/internal/fault/faulttest"
	"github.com/dlock-go/dlock/session"
)

// cutOff is a session of TTL 2s (local validity TTL − margin = 1.5s) cut
// off from etcd right after its grant.
type cutOff struct {
	s             *session.Session
	before, after time.Time // real times around session.New
	granted       time.Duration
	expired       clientv3.WatchChan // the server's expiry of the lease: a key bound to it deleted
}

const cutOffLocal = 1500 * time.Millisecond

func newCutOff(t *testing.T, ctx context.Context) *cutOff {
	t.Helper()
	c := etcdtest.New(t)
	cli := c.Client(t)
	pcli, proxy := c.ProxiedClient(t)
	co := &cutOff{before: time.Now()}
	s, err := session.New(ctx, pcli, session.WithTTL(2*time.Second))
	require.NoError(t, err)
	co.after, co.s = time.Now(), s
	t.Cleanup(func() {
		proxy.Unblackhole()
		cctx, cancel := context.WithTimeout(context.Background(), etcdtest.CloseTimeout)
		defer cancel()
		s.Close(cctx)
	})
	ttl, err := cli.TimeToLive(ctx, s.Lease())
	require.NoError(t, err)
	co.granted = time.Duration(ttl.GrantedTTL) * time.Second
	require.Equal(t, 2*time.Second, co.granted)
	_, err = cli.Put(ctx, "bound", "x", clientv3.WithLease(s.Lease()))
	require.NoError(t, err)
	co.expired = cli.Watch(ctx, "bound", clientv3.WithFilterPut())
	proxy.Blackhole()
	return co
}

// wait waits for Done and returns the real time it saw it closed, and
// whether the server had expired the lease before.
func (co *cutOff) wait(t *testing.T, ctx context.Context) (closed time.Time, expiredFirst bool) {
	t.Helper()
	for {
		select {
		case <-co.s.Done():
			return time.Now(), expiredFirst
		case wr := <-co.expired:
			require.NoError(t, wr.Err())
			require.Len(t, wr.Events, 1)
			expiredFirst = true
			co.expired = nil
		case <-ctx.Done():
			require.FailNow(t, "Done did not close")
		}
	}
}

// Under DLOCK_CLOCK_RATE=r the local deadline passes (TTL − margin)/r
// after the grant, in real time: a slow clock (r < 1) closes Done after
// the server has expired the lease, past any deadline the real clock
// would give; a fast one (r > 1), earlier than the real clock would.
func TestFaultClockRateMovesDone(t *testing.T) {
	for _, tc := range []struct {
		env string
		r   float64
	}{{"0.25", 0.25}, {"4", 4}} {
		t.Run("rate "+tc.env, func(t *testing.T) {
			faulttest.Set(t, tc.env, "")
			ctx := etcdtest.Context(t)
			co := newCutOff(t, ctx)
			closed, expiredFirst := co.wait(t, ctx)
			assert.ErrorIs(t, co.s.Err(), session.ErrExpired)
			assert.NotErrorIs(t, co.s.Err(), session.ErrLeaseGone)
			seam := time.Duration(float64(cutOffLocal) / tc.r)
			assert.False(t, closed.Before(co.before.Add(seam)), "Done closed %v after the grant; the seam's deadline is at least %v", closed.Sub(co.before), seam)
			if tc.r < 1 {
				assert.True(t, closed.After(co.after.Add(cutOffLocal)), "later than the real clock's deadline")
				assert.True(t, expiredFirst, "the server expired the lease while Done was still open")
			} else {
				assert.True(t, closed.Before(co.before.Add(cutOffLocal)), "earlier than the real clock's deadline: closed %v after the grant", closed.Sub(co.before))
				assert.False(t, expiredFirst, "a fast clock only errs toward a gap")
			}
		})
	}
}

// The plant late-done puts the local deadline at TTL + TTL/2 after the
// grant, past the server's expiry: cut off, the session's Done is still
// open when etcd expires its lease and deletes its keys.
func TestFaultLateDone(t *testing.T) {
	faulttest.Set(t, "", fault.LateDone)
	ctx := etcdtest.Context(t)
	co := newCutOff(t, ctx)
	deadline := co.s.Deadline()
	assert.False(t, deadline.Before(co.before.Add(co.granted+co.granted/2)), "deadline %v after the grant", deadline.Sub(co.before))
	assert.True(t, deadline.After(co.after.Add(co.granted)), "the deadline is past the server's expiry")
	_, expiredFirst := co.wait(t, ctx)
	assert.True(t, expiredFirst, "the server expired the lease while Done was still open")
	assert.ErrorIs(t, co.s.Err(), session.ErrExpired)
}

// hookLog records, in order, the session-end hook's calls for one lease
// and its attachment's End.
type hookLog struct {
	mu     sync.Mutex
	s      *session.Session
	events []string
	// From the hook's call:
	deadline time.Time
	err      error
	at       time.Time // real time of the call
	doneOpen bool
}

func (l *hookLog) hook(lease int64, deadline time.Time, err error) {
	if lease != int64(l.s.Lease()) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, "hook")
	l.deadline, l.err, l.at = deadline, err, time.Now()
	select {
	case <-l.s.Done():
	default:
		l.doneOpen = true
	}
}

func (l *hookLog) Heartbeat(context.Context) {}

func (l *hookLog) End(error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, "end")
}

// The session-end hook runs once per session, before the attachments end
// (and with them the grants on the session) and before Done closes, with
// the lease, the session's Err, and its local deadline in real wall-clock
// time, here under a slow clock.
func TestFaultSessionEndHook(t *testing.T) {
	faulttest.Set(t, "0.5", "")
	ctx := etcdtest.Context(t)
	t.Cleanup(func() { fault.OnSessionEnd(nil) })
	type key struct{}

	t.Run("expired", func(t *testing.T) {
		co := newCutOff(t, ctx)
		l := &hookLog{s: co.s}
		fault.OnSessionEnd(l.hook)
		attach.To(co.s, key{}, func() attach.Attachment { return l })
		co.wait(t, ctx)
		l.mu.Lock()
		defer l.mu.Unlock()
		assert.Equal(t, []string{"hook", "end"}, l.events)
		assert.True(t, l.doneOpen, "the hook runs before Done closes")
		assert.ErrorIs(t, l.err, session.ErrExpired)
		assert.Equal(t, l.deadline.Round(0), l.deadline, "no monotonic reading")
		assert.Equal(t, fault.Wall(co.s.Deadline()), l.deadline)
		// The deadline is when the session ended, in real time: at rate
		// 0.5 its 1.5s of local validity took 3s.
		assert.False(t, l.at.Before(l.deadline), "the hook ran %v before the deadline it reports", l.deadline.Sub(l.at))
		assert.WithinDuration(t, l.at, l.deadline, 250*time.Millisecond)
		assert.False(t, l.deadline.Before(co.before.Add(2*cutOffLocal).Round(0)))
	})

	t.Run("closed", func(t *testing.T) {
		cli := etcdtest.New(t).Client(t)
		s, err := session.New(ctx, cli, session.WithTTL(2*time.Second))
		require.NoError(t, err)
		l := &hookLog{s: s}
		fault.OnSessionEnd(l.hook)
		attach.To(s, key{}, func() attach.Attachment { return l })
		require.NoError(t, s.Close(ctx))
		require.NoError(t, s.Close(ctx))
		l.mu.Lock()
		defer l.mu.Unlock()
		assert.Equal(t, []string{"hook", "end"}, l.events, "once")
		assert.True(t, l.doneOpen)
		assert.ErrorIs(t, l.err, session.ErrClosed)
		assert.Equal(t, fault.Wall(s.Deadline()), l.deadline)
		assert.True(t, l.deadline.After(l.at), "closed before its deadline")
	})
}
