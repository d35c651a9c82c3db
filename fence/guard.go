package fence

import (
	"context"
	"sync"
)

// Guard admits or rejects fencing tokens at a resource. Admit returns nil if
// t may act on the resource now, an error matching ErrStaleToken if a higher
// token has been admitted for t.Name, ErrNoToken for Seq 0, and
// ErrInvalidToken for an empty Name. Implementations must be safe for
// concurrent use and must never admit a token lower than one they admitted
// before for the same Name.
type Guard interface {
	Admit(ctx context.Context, t Token) error
}

// MemoryGuard is a Guard that keeps the high-water mark per Name in memory.
// It suits a resource owned by one process (an in-memory store, a file the
// process alone writes). The zero value is not usable; call NewMemoryGuard.
// A MemoryGuard is safe for concurrent use and must not be copied.
type MemoryGuard struct {
	mu      sync.Mutex
	highest map[string]uint64
}

var _ Guard = (*MemoryGuard)(nil)

// NewMemoryGuard returns an empty MemoryGuard.
func NewMemoryGuard() *MemoryGuard {
	return &MemoryGuard{highest: make(map[string]uint64)}
}

// Admit records t.Seq as the high-water mark for t.Name if it is at least the
// current one, and rejects it otherwise. It does not block; ctx is accepted
// for the Guard interface and an already-ended ctx is reported.
func (g *MemoryGuard) Admit(ctx context.Context, t Token) error {
	if err := t.Check(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return g.Do(t, func() error { return nil })
}

// Do admits t and, while still holding the guard's mutex, runs fn: the
// check and the protected in-memory write happen atomically, so no higher
// token can be admitted between them. fn's error is returned as is; the
// high-water mark is raised even if fn fails.
func (g *MemoryGuard) Do(t Token, fn func() error) error {
	if err := t.Check(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if h := g.highest[t.Name]; t.Seq < h {
		return &StaleTokenError{Name: t.Name, Seq: t.Seq, Highest: h}
	}
	if g.highest == nil {
		g.highest = make(map[string]uint64)
	}
	g.highest[t.Name] = t.Seq
	return fn()
}

// Highest returns the highest Seq admitted for name, or 0.
func (g *MemoryGuard) Highest(name string) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.highest[name]
}
