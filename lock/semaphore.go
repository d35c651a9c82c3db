package lock

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock/internal/queue"
	"github.com/dlock-go/dlock/session"
)

// Semaphore is an etcd counting semaphore: up to permits grants of one
// name at a time, on the same queue of keys as a Mutex (the first permits
// keys of the queue hold). Waiters are granted in FIFO order; a release
// makes only the waiter it grants issue a request (every waiter keeps the
// count of entries before it from one watch on the queue). A cancelled or
// failed Acquire leaves no key; a session's end frees its permits at once.
//
// Every client of one name must use the same permits: an Acquire that
// finds the queue made with another number fails with ErrPermitsMismatch
// (as does one on a name used by a Mutex or an RWMutex: use one kind per
// name).
//
// Tokens: a permit's Token is its key's create revision. Tokens are
// distinct and increase in the order permits are granted, but permits
// overlap: a high-water-mark guard (fence.MemoryGuard, pgfence, ...) on a
// resource shared by all permit holders would reject an earlier holder's
// write after a later one's. Fence per resource that only one permit uses,
// or use the token to order, not to exclude.
//
// A Semaphore is safe for concurrent use; each Acquire is an independent
// grant.
type Semaphore struct {
	base
	permits int
	q       *queue.Queue
}

// NewSemaphore returns the semaphore called name with permits permits on
// src (a *session.Session or a *session.Manager). permits must be
// positive; name and options are checked as by New. It does no I/O.
func NewSemaphore(src session.Source, name string, permits int, opts ...Option) (*Semaphore, error) {
	b, err := newBase(src, name, opts)
	if err != nil {
		return nil, err
	}
	if permits <= 0 {
		return nil, fmt.Errorf("%w: permits %d must be positive", ErrInvalidOption, permits)
	}
	return &Semaphore{base: b, permits: permits, q: b.path.Queue(queue.Shared(permits))}, nil
}

// Acquire waits in FIFO order until one of the permits is granted, ctx
// ends or the session ends, with the same errors and cleanup as
// Mutex.Lock, and ErrPermitsMismatch (see Semaphore).
func (s *Semaphore) Acquire(ctx context.Context) (Held, error) {
	return s.acquire(ctx, s.q, "acquire", false)
}

// TryAcquire acquires a permit if one is free and nobody waits, otherwise
// it returns an error matching ErrLocked. Unlike Mutex.TryLock it takes
// two round trips when every permit is taken: it enqueues, reads the
// count, and removes its key again.
func (s *Semaphore) TryAcquire(ctx context.Context) (Held, error) {
	return s.acquire(ctx, s.q, "try acquire", true)
}
