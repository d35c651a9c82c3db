package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/internal/attach"
	"github.com/dlock-go/dlock/internal/fault"
	"github.com/dlock-go/dlock/internal/obs"
	"github.com/dlock-go/dlock/internal/retry"
)

// Session is one etcd lease kept alive by one heartbeat loop. Every key a
// session owns (locks, election candidacies) is bound to its lease, so when
// the lease ends all of them are deleted together, atomically.
//
// The session keeps a local deadline: the send time of the last acknowledged
// keepalive + TTL − safety margin, on the monotonic clock. Done closes at that
// deadline if no later keepalive was acknowledged, which is before the server
// can expire the lease (the server counts from when it received that
// keepalive, which is after we sent it). A holder that watches Done therefore
// stops acting before anyone else can be granted what it holds.
//
// A Session is safe for concurrent use. Close it when done; until then it
// runs one goroutine.
type Session struct {
	cli  *clientv3.Client
	id   clientv3.LeaseID
	opts options

	done     chan struct{}
	stopLoop context.CancelFunc
	loopDone chan struct{}

	ctx    context.Context // cancelled with err as cause when the session ends
	cancel context.CancelCauseFunc
	tel    *obs.T

	mu       sync.Mutex
	deadline time.Time // carries a monotonic reading
	err      error
	closed   bool

	// The lease-bound state of the locks and elections on the session
	// (internal/queue's), which it beats and ends: embedded, under an
	// unexported name, so that it makes *Session an attach.Owner without
	// a method in the session's API.
	attachSet
}

type attachSet = attach.Set

// New grants a lease on cli and starts its heartbeat loop. It fails if an
// option is invalid (the error names it and matches ErrInvalidOption), or if
// the lease cannot be granted before ctx ends.
func New(ctx context.Context, cli *clientv3.Client, opts ...Option) (*Session, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: client is nil", ErrInvalidOption)
	}
	o, err := build(opts)
	if err != nil {
		return nil, err
	}
	var sent time.Time
	resp, err := retry.Do(clientv3.WithRequireLeader(ctx), func(ctx context.Context) (*clientv3.LeaseGrantResponse, error) {
		sent = fault.Now() // the attempt that is granted counts
		return cli.Grant(ctx, int64(o.ttl/time.Second))
	})
	if err != nil {
		return nil, fmt.Errorf("session: grant lease: %w", err)
	}
	s := newSession(cli, resp.ID, o, sent.Add(o.validity(time.Duration(resp.TTL)*time.Second)))
	return s, nil
}

// validity is how long after a request granting or renewing the lease for
// ttl was sent the local deadline falls: ttl − margin. The local deadlines
// and the heartbeat schedule run on internal/fault's clock, which is the
// monotonic clock unless the build has the tag dlock_faults.
func (o *options) validity(ttl time.Duration) time.Duration {
	return fault.Validity(ttl, ttl-o.margin) // the plant LateDone makes it later
}

func newSession(cli *clientv3.Client, id clientv3.LeaseID, o options, deadline time.Time) *Session {
	loopCtx, stop := context.WithCancel(context.Background())
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &Session{
		ctx:      ctx,
		cancel:   cancel,
		cli:      cli,
		id:       id,
		opts:     o,
		done:     make(chan struct{}),
		stopLoop: stop,
		loopDone: make(chan struct{}),
		deadline: deadline,
		tel:      obs.New(obs.Config(o.tel), "etcd"),
	}
	go s.run(loopCtx, fault.Now())
	return s
}

// Client returns the etcd client the session runs on.
func (s *Session) Client() *clientv3.Client { return s.cli }

// Lease returns the session's lease ID.
func (s *Session) Lease() clientv3.LeaseID { return s.id }

// Deadline returns the current local deadline: the moment Done will close
// unless another keepalive is acknowledged first.
func (s *Session) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline
}

// Done returns a channel that is closed at the local deadline, when the
// server reports the lease gone, or on Close. Once closed, every key the
// session owns must be considered lost.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns nil while the session is live; once it has ended (Done is
// closed, or closing right now), why: ErrExpired
// (the local deadline passed), an error matching both ErrLeaseGone and
// ErrExpired (the server reported the lease gone), or ErrClosed.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close stops the heartbeat loop and revokes the lease, which deletes every
// key the session owns in one step. It returns when the loop has exited.
// Close is idempotent; later calls return nil. The revoke is attempted even
// if the session already expired, and its error (other than "lease not
// found") is returned.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()

	s.stopLoop()
	<-s.loopDone
	s.end(ErrClosed)
	_, err := retry.Do(clientv3.WithRequireLeader(ctx), func(ctx context.Context) (*clientv3.LeaseRevokeResponse, error) {
		return s.cli.Revoke(ctx, s.id)
	})
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("session: revoke lease %x: %w", int64(s.id), err)
	}
	return nil
}

// end ends the session with err, once: it calls internal/fault's session-end
// hook, ends the attachments (and with them the grants on the session),
// then closes Done and cancels Context.
func (s *Session) end(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = err
	deadline := s.deadline
	s.mu.Unlock()
	fault.SessionEnded(int64(s.id), deadline, err) // a no-op without the tag dlock_faults
	attach.End(&s.attachSet, err)
	close(s.done)
	s.cancel(err)
	level := slog.LevelWarn
	if errors.Is(err, ErrClosed) {
		level = slog.LevelDebug
	}
	s.tel.Logger().Log(context.Background(), level, "dlock: session ended", "lease", fmt.Sprintf("%016x", int64(s.id)), "cause", err)
	cause := obs.EndExpired
	switch {
	case errors.Is(err, ErrClosed):
		cause = obs.EndClosed
	case errors.Is(err, ErrLeaseGone):
		cause = obs.EndLeaseGone
	}
	s.tel.SessionEnded(cause)
}

// extend moves the local deadline forward (never back).
func (s *Session) extend(d time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.After(s.deadline) {
		s.deadline = d
	}
}

// retryInterval is the wait after a failed keepalive.
func (s *Session) retryInterval() time.Duration {
	r := s.opts.heartbeat / 4
	return min(max(r, 50*time.Millisecond), time.Second)
}

// run is the heartbeat loop. It exits when ctx ends (Close) or the session
// ends.
func (s *Session) run(ctx context.Context, lastSend time.Time) {
	defer close(s.loopDone)
	ka := &keepalive{cli: s.cli, id: s.id, ctx: clientv3.WithRequireLeader(ctx)}
	defer ka.close()
	next := s.opts.beat(lastSend.Add(s.opts.heartbeat))
	hb := time.NewTimer(fault.Until(next))
	defer hb.Stop()
	for {
		deadline := s.Deadline()
		expire := time.NewTimer(fault.Until(deadline))
		select {
		case <-ctx.Done():
			expire.Stop()
			return
		case <-expire.C:
			s.end(ErrExpired)
			return
		case <-hb.C:
			expire.Stop()
		}
		var sent time.Time
		kctx, cancel := context.WithDeadline(ctx, fault.Real(deadline))
		resp, err := retry.Do(kctx, func(ctx context.Context) (*pb.LeaseKeepAliveResponse, error) {
			sent = fault.Now() // the attempt that is acknowledged counts
			return ka.once(ctx)
		})
		cancel()
		switch {
		case err == nil:
			s.extend(sent.Add(s.opts.validity(time.Duration(resp.TTL) * time.Second)))
			bctx, cancel := context.WithTimeout(ctx, s.opts.heartbeat/2)
			attach.Heartbeat(bctx, &s.attachSet) // the check of the keys the locks hold
			cancel()
			hb.Reset(fault.Until(s.opts.beat(sent.Add(s.opts.heartbeat))))
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			s.end(ErrLeaseGone)
			return
		case ctx.Err() != nil:
			return
		default:
			if !fault.Now().Before(s.Deadline()) {
				s.end(ErrExpired)
				return
			}
			hb.Reset(s.retryInterval())
		}
	}
}
