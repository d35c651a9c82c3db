package locktest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/lock"
)

// Memory is an in-memory lock service for the tests of code that takes a
// lock.Locker: no server, and a loss on demand (Lose), which is hard to
// provoke at the right moment against a real cluster.
//
// Its Lockers keep the etcd Mutex's promises within one process, and pass
// Run: one grant at a time per name, waiters granted in FIFO order, a
// cancelled waiter removed from the queue, tokens strictly increasing per
// name across every grant (after a Lose too), and the same errors (under
// errors.Is: lock.ErrLocked, lock.ErrLockLost, lock.ErrUnlocked,
// lock.ErrInvalidName, the ctx's error). A grant ends only by Unlock or Lose: there is no session, no
// TTL and no pause.
//
// A Memory is safe for concurrent use, and runs no goroutine. It keeps the
// last token of every name it has granted (so that tokens never go back).
// The zero value is not usable; call NewMemory.
type Memory struct {
	mu    sync.Mutex
	locks map[string]*memLock
}

// memLock is one name's state, guarded by Memory.mu. A lock without a
// holder has no waiters: a release hands the lock to the first waiter.
type memLock struct {
	seq     uint64       // the last token granted
	holder  *memGrant    // nil when free
	waiters []*memWaiter // FIFO
}

// memWaiter is a Lock call that waits; ready closes once g is set.
type memWaiter struct {
	ready chan struct{}
	g     *memGrant
}

// errLose is the cause of a grant ended by Memory.Lose.
var errLose = fmt.Errorf("%w (Memory.Lose)", lock.ErrLockLost)

// NewMemory returns an empty in-memory lock service.
func NewMemory() *Memory {
	return &Memory{locks: map[string]*memLock{}}
}

// Locker returns a Locker of the lock called name in m. Lockers of the
// same name in one Memory contend for the same lock; Memories are
// independent. A name that lock.ValidateName refuses makes Lock and
// TryLock return an error matching lock.ErrInvalidName (where the
// backends' constructors would). Unlock does no I/O: it ignores its ctx.
func (m *Memory) Locker(name string) lock.Locker { return &memLocker{m: m, name: name} }

// Lose ends the current grant of name as a loss, as an expired session or
// a key deleted behind the holder's back would: its Done closes, its Err
// and Unlock return an error matching lock.ErrLockLost, and the lock goes
// to the first waiter, if any, with a higher token. It returns false if
// nobody holds name.
func (m *Memory) Lose(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.locks[name]
	if l == nil || l.holder == nil {
		return false
	}
	m.end(l, errLose)
	return true
}

// Holder returns the token of the current grant of name, and false if
// nobody holds it: a test's way to check which grant holds the lock, or
// that the code under test released it.
func (m *Memory) Holder(name string) (fence.Token, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.locks[name]
	if l == nil || l.holder == nil {
		return fence.Token{}, false
	}
	return l.holder.tok, true
}

// Waiting returns the number of Lock calls waiting for name: a test's way
// to know, without sleeping, that the code under test is queued.
func (m *Memory) Waiting(name string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.locks[name]; l != nil {
		return len(l.waiters)
	}
	return 0
}

// grant makes a new grant of l, the lock called name; m.mu is held and l
// has no holder.
func (m *Memory) grant(l *memLock, name string) *memGrant {
	l.seq++
	g := &memGrant{m: m, l: l, tok: fence.Token{Name: name, Seq: l.seq}, done: make(chan struct{})}
	l.holder = g
	return g
}

// end ends l's current grant with cause and hands the lock to the first
// waiter; m.mu is held and l has a holder.
func (m *Memory) end(l *memLock, cause error) {
	g := l.holder
	g.err = cause
	close(g.done)
	l.holder = nil
	if len(l.waiters) > 0 {
		w := l.waiters[0]
		l.waiters = slices.Delete(l.waiters, 0, 1)
		w.g = m.grant(l, g.tok.Name)
		close(w.ready)
	}
}

type memLocker struct {
	m    *Memory
	name string
}

var _ lock.Locker = (*memLocker)(nil)

// LockKey is the lock's place in lock.LockAll's order.
func (l *memLocker) LockKey() string { return fmt.Sprintf("memory:%p:%s", l.m, l.name) }

// start checks the name and ctx, and returns name's lock with m.mu held.
func (l *memLocker) start(ctx context.Context, op string) (*memLock, error) {
	if err := lock.ValidateName(l.name); err != nil {
		return nil, errs.New("locktest", l.name, op, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, errs.New("locktest", l.name, op, err)
	}
	l.m.mu.Lock()
	ml := l.m.locks[l.name]
	if ml == nil {
		ml = &memLock{}
		l.m.locks[l.name] = ml
	}
	return ml, nil
}

func (l *memLocker) Lock(ctx context.Context) (lock.Held, error) {
	ml, err := l.start(ctx, "lock")
	if err != nil {
		return nil, err
	}
	if ml.holder == nil {
		g := l.m.grant(ml, l.name)
		l.m.mu.Unlock()
		return g, nil
	}
	w := &memWaiter{ready: make(chan struct{})}
	ml.waiters = append(ml.waiters, w)
	l.m.mu.Unlock()

	select {
	case <-w.ready:
		return w.g, nil
	case <-ctx.Done():
	}
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if w.g == nil {
		ml.waiters = slices.DeleteFunc(ml.waiters, func(x *memWaiter) bool { return x == w })
	} else if w.g.err == nil { // granted as ctx ended: pass it on
		l.m.end(ml, lock.ErrUnlocked)
	}
	return nil, errs.New("locktest", l.name, "lock", ctx.Err())
}

func (l *memLocker) TryLock(ctx context.Context) (lock.Held, error) {
	ml, err := l.start(ctx, "try lock")
	if err != nil {
		return nil, err
	}
	defer l.m.mu.Unlock()
	if ml.holder != nil {
		return nil, errs.New("locktest", l.name, "try lock", lock.ErrLocked)
	}
	return l.m.grant(ml, l.name), nil
}

// memGrant is a grant of a Memory lock.
type memGrant struct {
	m    *Memory
	l    *memLock
	tok  fence.Token
	done chan struct{}
	err  error // guarded by m.mu: nil while held, then why it ended
}

func (g *memGrant) Token() fence.Token    { return g.tok }
func (g *memGrant) Done() <-chan struct{} { return g.done }

func (g *memGrant) Err() error {
	g.m.mu.Lock()
	defer g.m.mu.Unlock()
	return errs.New("locktest", g.tok.Name, "", g.err)
}

func (g *memGrant) Unlock(context.Context) error {
	g.m.mu.Lock()
	defer g.m.mu.Unlock()
	switch {
	case g.err == nil:
		g.m.end(g.l, lock.ErrUnlocked)
		return nil
	case errors.Is(g.err, lock.ErrUnlocked):
		return nil
	}
	return errs.New("locktest", g.tok.Name, "unlock", g.err)
}
