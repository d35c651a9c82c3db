package session_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/internal/attach"
	"github.com/dlock-go/dlock/session"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBadOptions(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	cases := []struct {
		name  string
		cli   *clientv3.Client
		opts  []session.Option
		field string
	}{
		{"nil client", nil, nil, "client"},
		{"zero ttl", cli, []session.Option{session.WithTTL(0)}, "ttl"},
		{"negative ttl", cli, []session.Option{session.WithTTL(-time.Second)}, "ttl"},
		{"ttl below etcd minimum", cli, []session.Option{session.WithTTL(time.Second)}, "ttl"},
		{"fractional ttl", cli, []session.Option{session.WithTTL(2500 * time.Millisecond)}, "ttl"},
		{"heartbeat equal to ttl", cli, []session.Option{session.WithTTL(5 * time.Second), session.WithHeartbeat(5 * time.Second)}, "heartbeat"},
		{"negative heartbeat", cli, []session.Option{session.WithHeartbeat(-time.Second)}, "heartbeat"},
		{"margin too large", cli, []session.Option{session.WithTTL(6 * time.Second), session.WithHeartbeat(2 * time.Second), session.WithSafetyMargin(4 * time.Second)}, "margin"},
		{"negative margin", cli, []session.Option{session.WithSafetyMargin(-2 * time.Second)}, "margin"},
		{"nil option", cli, []session.Option{session.WithTTL(5 * time.Second), nil}, "option 1 is nil"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := session.New(ctx, tc.cli, tc.opts...)
			require.Error(t, err)
			assert.Nil(t, s)
			assert.ErrorIs(t, err, session.ErrInvalidOption)
			assert.ErrorContains(t, err, tc.field)
		})
	}
	resp, err := cli.Leases(ctx)
	require.NoError(t, err)
	assert.Empty(t, resp.Leases, "rejected options grant no lease")
}

func TestCloseRevokes(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	s, err := session.New(ctx, cli)
	require.NoError(t, err)
	assert.True(t, s.Deadline().After(time.Now()))
	_, err = cli.Put(ctx, "owned", "x", clientv3.WithLease(s.Lease()))
	require.NoError(t, err)
	select {
	case <-s.Done():
		t.Fatal("Done closed early")
	default:
	}
	assert.NoError(t, s.Err())
	require.NoError(t, s.Close(ctx))
	<-s.Done()
	assert.ErrorIs(t, s.Err(), session.ErrClosed)
	require.NoError(t, s.Close(ctx), "Close is idempotent")
	resp, err := cli.Get(ctx, "owned")
	require.NoError(t, err)
	assert.Empty(t, resp.Kvs, "closing the session deletes its keys")
}

func TestHeartbeatExtendsDeadline(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	s, err := session.New(ctx, cli, session.WithTTL(2*time.Second), session.WithHeartbeat(100*time.Millisecond))
	require.NoError(t, err)
	defer s.Close(ctx)
	first := s.Deadline()
	// Deadline moves only when a keepalive is acknowledged: wait for it to
	// move, bounded by ctx, and for the session to stay live well past the
	// first deadline.
	for !s.Deadline().After(first) {
		select {
		case <-ctx.Done():
			t.Fatal("deadline never moved")
		case <-s.Done():
			t.Fatalf("session ended: %v", s.Err())
		case <-time.After(20 * time.Millisecond): // polling the deadline: no event exists for it
		}
	}
	timer := time.NewTimer(time.Until(first) + 500*time.Millisecond)
	defer timer.Stop()
	select {
	case <-s.Done():
		t.Fatalf("session ended although keepalives succeed: %v", s.Err())
	case <-timer.C:
	}
	assert.True(t, s.Deadline().After(first))
}

func TestRevokedElsewhere(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	s, err := session.New(ctx, cli, session.WithTTL(3*time.Second), session.WithHeartbeat(200*time.Millisecond))
	require.NoError(t, err)
	defer s.Close(ctx)
	_, err = cli.Revoke(ctx, s.Lease())
	require.NoError(t, err)
	select {
	case <-s.Done():
	case <-ctx.Done():
		t.Fatal("session did not notice its lease was revoked")
	}
	assert.ErrorIs(t, s.Err(), session.ErrLeaseGone)
	assert.ErrorIs(t, s.Err(), session.ErrExpired)
}

// Cut off from etcd, the session's Done closes before the server expires
// the lease (observed by another client as the deletion of a key bound to
// it).
func TestLocalDeadlineBeforeServerExpiry(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	ctx := etcdtest.Context(t)
	pcli, proxy := c.ProxiedClient(t)
	s, err := session.New(ctx, pcli, session.WithTTL(2*time.Second))
	require.NoError(t, err)
	defer s.Close(ctx)
	cli := c.Client(t)
	_, err = cli.Put(ctx, "bound", "x", clientv3.WithLease(s.Lease()))
	require.NoError(t, err)
	w := cli.Watch(ctx, "bound", clientv3.WithFilterPut())
	proxy.Blackhole()
	defer proxy.Unblackhole()
	wr := <-w
	require.NoError(t, wr.Err())
	require.Len(t, wr.Events, 1)
	select {
	case <-s.Done():
	default:
		t.Fatal("the server expired the lease while the session still looked live")
	}
	assert.ErrorIs(t, s.Err(), session.ErrExpired)
}

func TestGrantFailsOnDeadContext(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	ctx, cancel := context.WithCancel(etcdtest.Context(t))
	cancel()
	_, err := session.New(ctx, c.Client(t))
	assert.ErrorIs(t, err, context.Canceled)
}

// recorder is an attachment that records the session's calls.
type recorder struct {
	beats    chan struct{}
	ended    chan error
	doneOpen bool // Done was still open when End ran
	s        *session.Session
}

func (r *recorder) Heartbeat(context.Context) {
	select {
	case r.beats <- struct{}{}:
	default:
	}
}

func (r *recorder) End(err error) {
	select {
	case <-r.s.Done():
	default:
		r.doneOpen = true
	}
	r.ended <- err
}

// An attachment is kept per key, runs at each acknowledged keepalive, and
// is ended once, with the session's cause, before Done closes; one
// attached to an ended session is ended at once.
func TestAttach(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	s, err := session.New(ctx, cli, session.WithTTL(2*time.Second), session.WithHeartbeat(100*time.Millisecond))
	require.NoError(t, err)
	type key struct{}
	r := &recorder{beats: make(chan struct{}, 1), ended: make(chan error, 2), s: s}
	a := attach.To(s, key{}, func() attach.Attachment { return r })
	require.Same(t, r, a)
	assert.Same(t, r, attach.To(s, key{}, func() attach.Attachment { t.Error("made twice"); return nil }), "one attachment per key")
	select {
	case <-r.beats:
	case <-ctx.Done():
		t.Fatal("no heartbeat reached the attachment")
	}
	require.NoError(t, s.Close(ctx))
	assert.ErrorIs(t, <-r.ended, session.ErrClosed)
	assert.True(t, r.doneOpen, "End runs before Done closes")
	assert.Empty(t, r.ended, "End runs once")

	late := &recorder{beats: make(chan struct{}, 1), ended: make(chan error, 1), s: s}
	attach.To(s, key{}, func() attach.Attachment { return late })
	assert.ErrorIs(t, <-late.ended, session.ErrClosed, "attached to an ended session: ended at once")
}
