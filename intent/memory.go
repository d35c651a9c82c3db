package intent

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/fault"
)

// Memory is a Store in memory, for tests (with lock/locktest's Memory): it
// keeps the Store's promises within one process. It is safe for concurrent
// use; the zero value is not usable, call NewMemory.
type Memory struct {
	mu    sync.Mutex
	locks map[string]*memJournal
	now   func() time.Time
}

type memJournal struct {
	mark uint64
	next uint64
	recs map[string]*memRecord
}

type memRecord struct {
	Record
	order uint64
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty Memory.
func NewMemory() *Memory {
	return &Memory{locks: map[string]*memJournal{}, now: time.Now}
}

// fence checks h's token against the mark of its lock and raises the mark;
// m.mu is held.
func (m *Memory) fence(ctx context.Context, h Grant) (*memJournal, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t := h.Token()
	if err := t.Check(); err != nil {
		return nil, err
	}
	l := m.locks[t.Name]
	if l == nil {
		l = &memJournal{recs: map[string]*memRecord{}}
		m.locks[t.Name] = l
	}
	if l.mark > t.Seq && !fault.Planted(fault.UnfencedIntent) {
		return nil, Stale(t, l.mark)
	}
	l.mark = max(l.mark, t.Seq)
	return l, nil
}

// Begin implements Store.
func (m *Memory) Begin(ctx context.Context, h Grant, fresh Intent) (Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err := m.fence(ctx, h)
	if err != nil {
		return Record{}, err
	}
	if r := l.recs[fresh.Op]; r != nil {
		return r.Record, nil
	}
	l.next++
	r := &memRecord{Record: Record{Intent: fresh}, order: l.next}
	l.recs[fresh.Op] = r
	return r.Record, nil
}

// Finish implements Store.
func (m *Memory) Finish(ctx context.Context, h Grant, op, failure string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err := m.fence(ctx, h)
	if err != nil {
		return err
	}
	r := l.recs[op]
	if r == nil {
		return fmt.Errorf("intent: no record of %q", op)
	}
	if !r.Done {
		r.Done, r.Failure, r.At = true, failure, m.now()
	}
	return nil
}

// Open implements Store.
func (m *Memory) Open(ctx context.Context, h Grant) ([]Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err := m.fence(ctx, h)
	if err != nil {
		return nil, err
	}
	var open []*memRecord
	for _, r := range l.recs {
		if !r.Done {
			open = append(open, r)
		}
	}
	sort.Slice(open, func(i, k int) bool { return open[i].order < open[k].order })
	out := make([]Record, len(open))
	for i, r := range open {
		out[i] = r.Record
	}
	return out, nil
}

// Mark implements Store.
func (m *Memory) Mark(ctx context.Context, name string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.locks[name]; l != nil {
		return l.mark, nil
	}
	return 0, nil
}

// Compact implements Store.
func (m *Memory) Compact(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, l := range m.locks {
		for op, r := range l.recs {
			if n == limit {
				return n, nil
			}
			if r.Done && r.At.Before(before) {
				delete(l.recs, op)
				n++
			}
		}
	}
	return n, nil
}
