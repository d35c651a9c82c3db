package lock

import (
	"context"

	"github.com/dlock-go/dlock/internal/queue"
	"github.com/dlock-go/dlock/session"
)

// RWMutex is an etcd reader/writer lock: Lock is exclusive, RLock shared
// with other readers. Readers and writers wait in one FIFO queue of keys
// (ordered by create revision), so a queued writer is never starved by
// readers that came after it: they queue behind it. A writer waits for
// every earlier key; a reader only for the earlier writers, and watches
// only the last of them, so a writer's release grants the run of readers
// behind it at once.
//
// A writer's Token is its key's create revision and fences like a
// Mutex's: it is greater than every earlier grant's, reader or writer. A
// reader's Token orders it after the writers before it, but readers
// overlap each other: do not fence a shared resource's writes with reader
// tokens against each other. Lock and TryLock make the RWMutex a Locker
// with a Mutex's guarantees; the writer keys are a Mutex's, so a
// Mutex of the same name and prefix acts as one more writer.
//
// An RWMutex is safe for concurrent use; every call is an independent
// grant.
type RWMutex struct {
	base
	writer *queue.Queue
	reader *queue.Queue
}

var _ Locker = (*RWMutex)(nil)

// NewRWMutex returns the reader/writer lock called name on src (a
// *session.Session or a *session.Manager); name and options are checked as
// by New. It does no I/O.
func NewRWMutex(src session.Source, name string, opts ...Option) (*RWMutex, error) {
	b, err := newBase(src, name, opts)
	if err != nil {
		return nil, err
	}
	return &RWMutex{base: b, writer: b.path.Queue(queue.Exclusive), reader: b.path.Queue(queue.Reader)}, nil
}

// LockKey returns the lock's place in LockAll's order, which takes the
// exclusive side: the LockKey of the Mutex of the same name and prefix.
func (rw *RWMutex) LockKey() string { return "etcd:" + rw.writer.Prefix() }

// Lock waits in FIFO order until no other grant, reader or writer, holds
// the lock, with the same errors and cleanup as Mutex.Lock.
func (rw *RWMutex) Lock(ctx context.Context) (Held, error) {
	return rw.acquire(ctx, rw.writer, "lock", false)
}

// TryLock takes the lock if nobody holds or waits for it, in one round
// trip; otherwise it returns an error matching ErrLocked and creates no
// key.
func (rw *RWMutex) TryLock(ctx context.Context) (Held, error) {
	return rw.acquire(ctx, rw.writer, "try lock", true)
}

// RLock waits in FIFO order until no writer that came before it holds or
// waits for the lock; it shares the lock with other readers.
func (rw *RWMutex) RLock(ctx context.Context) (Held, error) {
	return rw.acquire(ctx, rw.reader, "rlock", false)
}

// TryRLock takes a read lock if no writer holds or waits for the lock, in
// one round trip; otherwise it returns an error matching ErrLocked and
// creates no key.
func (rw *RWMutex) TryRLock(ctx context.Context) (Held, error) {
	return rw.acquire(ctx, rw.reader, "try rlock", true)
}
