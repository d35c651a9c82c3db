package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Source is what the etcd locks and elections of this module run on: a
// *Session (one lease, for good) or a *Manager (a session renewed after it
// ends). Each acquire asks Current for the session to run on; its grant is
// then bound to that session alone.
type Source interface {
	// Current returns the session for the next acquire. A *Session returns
	// itself, live or ended (an acquire on an ended session fails with its
	// package's ErrSessionDone). A *Manager returns its live session,
	// starting a new one when the last has ended.
	Current(ctx context.Context) (*Session, error)
	// Client returns the etcd client the sessions run on.
	Client() *clientv3.Client
}

var (
	_ Source = (*Session)(nil)
	_ Source = (*Manager)(nil)
)

// Current returns s itself, so that a *Session is a Source whose grants
// all share one lease and end with it.
func (s *Session) Current(context.Context) (*Session, error) { return s, nil }

// Retry bounds of a Manager starting a session while etcd is unreachable:
// the wait between attempts starts at MinRetry and doubles up to MaxRetry
// (with jitter).
const (
	MinRetry = 100 * time.Millisecond
	MaxRetry = 2 * time.Second
)

// Manager keeps one live session on a client for a long-running process:
// when the session ends (a partition longer than its TTL, a revoked lease),
// the grants made on it report their loss as usual, and the next Current
// starts one fresh session that every later acquire shares. Lockers and
// Elections built on a Manager therefore keep working across session ends
// without being rebuilt.
//
// A Manager starts sessions lazily, on the Current that finds none live;
// while etcd is unreachable, Current retries with a jittered backoff
// (MinRetry to MaxRetry) until its ctx ends, and concurrent callers share
// one attempt. It logs each session's start (INFO) and end (WARN, or DEBUG
// for Close) to the logger given with WithTelemetry.
//
// A Manager is safe for concurrent use. Close it when done; it runs no
// goroutine of its own beyond its current session's heartbeat loop.
type Manager struct {
	cli  *clientv3.Client
	opts []Option
	log  *slog.Logger

	mu      sync.Mutex
	cur     *Session
	pending chan struct{} // closed when the attempt in flight is over; nil if none
	closed  bool
	backoff time.Duration // the next wait after a failed attempt; 0 after a success
}

// ErrManagerClosed is returned by Manager.Current after Close.
var ErrManagerClosed = errors.New("session: manager closed")

// NewManager returns a Manager that starts its sessions on cli with opts.
// It validates opts (errors match ErrInvalidOption) and does no I/O: call
// Current to start the first session eagerly.
func NewManager(cli *clientv3.Client, opts ...Option) (*Manager, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: client is nil", ErrInvalidOption)
	}
	o, err := build(opts)
	if err != nil {
		return nil, err
	}
	return &Manager{cli: cli, opts: opts, log: o.logger()}, nil
}

// Client returns the etcd client the Manager's sessions run on.
func (m *Manager) Client() *clientv3.Client { return m.cli }

// Current returns the Manager's live session, starting a new one if there
// is none (the first call, or after the last ended). It retries while etcd
// is unreachable until ctx ends; the error then matches ctx.Err() and says
// why the last attempt failed. After Close it returns ErrManagerClosed.
func (m *Manager) Current(ctx context.Context) (*Session, error) {
	var lastErr error
	m.mu.Lock()
	for {
		switch {
		case m.closed:
			m.mu.Unlock()
			return nil, ErrManagerClosed
		case m.cur != nil && m.cur.Err() == nil:
			s := m.cur
			m.mu.Unlock()
			return s, nil
		case m.pending != nil:
			// Another caller is starting the session: wait for it.
			ch := m.pending
			m.mu.Unlock()
			select {
			case <-ctx.Done():
				return nil, m.ctxErr(ctx, lastErr)
			case <-ch:
			}
			m.mu.Lock()
			continue
		}
		wait := m.backoff
		ch := make(chan struct{})
		m.pending = ch
		m.mu.Unlock()

		s, err := m.start(ctx, wait)

		m.mu.Lock()
		m.pending = nil
		close(ch)
		switch {
		case err == nil && m.closed:
			m.mu.Unlock()
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = s.Close(cctx)
			return nil, ErrManagerClosed
		case err == nil:
			m.cur, m.backoff = s, 0
			m.mu.Unlock()
			return s, nil
		case errors.Is(err, ErrInvalidOption):
			m.mu.Unlock()
			return nil, err
		}
		m.backoff = min(max(2*wait, MinRetry), MaxRetry)
		lastErr = err
		if ctx.Err() != nil {
			m.mu.Unlock()
			return nil, m.ctxErr(ctx, lastErr)
		}
	}
}

func (m *Manager) ctxErr(ctx context.Context, last error) error {
	if errors.Is(last, ctx.Err()) {
		return last
	}
	if last == nil {
		return fmt.Errorf("session: manager: %w", ctx.Err())
	}
	return fmt.Errorf("session: manager: %w (last attempt: %v)", ctx.Err(), last)
}

// start waits (jittered, up to wait) and starts a session.
func (m *Manager) start(ctx context.Context, wait time.Duration) (*Session, error) {
	if wait > 0 {
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	s, err := New(ctx, m.cli, m.opts...)
	if err != nil {
		m.log.WarnContext(ctx, "dlock: session: start failed", "err", err)
		return nil, err
	}
	m.log.InfoContext(ctx, "dlock: session started", "lease", fmt.Sprintf("%016x", int64(s.Lease())), "ttl", s.opts.ttl)
	return s, nil
}

// Close closes the current session (revoking its lease: every grant on it
// is released at once) and makes later Current calls fail. It is
// idempotent.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	s := m.cur
	m.cur = nil
	m.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.Close(ctx)
}
