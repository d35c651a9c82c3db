package locktest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/lock/locktest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// memService is an in-process reference lock service: the simplest Locker
// that keeps every promise, so the suite can be checked without a server.
type memService struct {
	mu     sync.Mutex
	holder map[string]*memHeld
	seq    map[string]uint64
	freed  map[string]chan struct{} // closed when name is released
}

func newMemService() *memService {
	return &memService{holder: map[string]*memHeld{}, seq: map[string]uint64{}, freed: map[string]chan struct{}{}}
}

type memLocker struct {
	s    *memService
	name string
}

type memHeld struct {
	s     *memService
	tok   fence.Token
	done  chan struct{}
	mu    sync.Mutex
	err   error
	freed bool
}

func (l *memLocker) TryLock(ctx context.Context) (lock.Held, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h, _ := l.try()
	if h == nil {
		return nil, lock.ErrLocked
	}
	return h, nil
}

func (l *memLocker) try() (*memHeld, <-chan struct{}) {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holder[l.name] != nil {
		return nil, s.freed[l.name]
	}
	s.seq[l.name]++
	h := &memHeld{s: s, tok: fence.Token{Name: l.name, Seq: s.seq[l.name]}, done: make(chan struct{})}
	s.holder[l.name] = h
	s.freed[l.name] = make(chan struct{})
	return h, nil
}

func (l *memLocker) Lock(ctx context.Context) (lock.Held, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("mem: %w", err)
		}
		h, freed := l.try()
		if h != nil {
			return h, nil
		}
		select {
		case <-ctx.Done():
		case <-freed:
		}
	}
}

// forget ends h if it is still the holder; reason becomes Err.
func (h *memHeld) forget(reason error) bool {
	s := h.s
	s.mu.Lock()
	defer s.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		h.err = reason
		close(h.done)
	}
	if s.holder[h.tok.Name] != h {
		return false
	}
	delete(s.holder, h.tok.Name)
	close(s.freed[h.tok.Name])
	return true
}

func (h *memHeld) Token() fence.Token    { return h.tok }
func (h *memHeld) Done() <-chan struct{} { return h.done }
func (h *memHeld) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

func (h *memHeld) Unlock(ctx context.Context) error {
	h.mu.Lock()
	if h.freed {
		err := h.err
		h.mu.Unlock()
		if err == lock.ErrUnlocked {
			return nil
		}
		return err
	}
	h.freed = true
	h.mu.Unlock()
	if !h.forget(lock.ErrUnlocked) {
		return h.Err()
	}
	return nil
}

func TestRunReference(t *testing.T) {
	s := newMemService()
	locktest.Run(t, locktest.Backend{
		New: func(t *testing.T, name string) lock.Locker { return &memLocker{s: s, name: name} },
		Lose: func(t *testing.T, h lock.Held) {
			h.(*memHeld).forget(lock.ErrLockLost)
		},
		Construct: func(name string) error { return lock.ValidateName(name) },
		Bad: map[string]func() error{
			"empty name": func() error { return lock.ValidateName("") },
		},
	})
}
