package queue

import (
	"context"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/internal/fault"
)

// Hold is the life of a granted entry (a lock grant, a leadership term).
// It ends when the session ends (synchronously, before the session's own
// Done closes: its state ends it), when the entry's key is found deleted
// (checked at each heartbeat from the first call to Done on: see "Holds"
// in docs/queue.md), or on Release. It is safe for concurrent use.
type Hold struct {
	q *Queue
	t ticket

	watchOnce sync.Once

	releaseMu sync.Mutex // serialises Release
	onEnd     func(error)

	mu          sync.Mutex
	done        chan struct{}
	err         error
	released    bool // Release deleted the key
	releasing   bool // a Release's delete is in flight: a deletion may be ours
	missingSeen bool // the heartbeat's check found the key missing while releasing
}

// newHold starts the hold of ticket t, among its session's live holds; it
// fails with ErrSessionEnded if the session has ended.
func newHold(q *Queue, t ticket) (*Hold, error) {
	h := &Hold{q: q, t: t, done: make(chan struct{})}
	if err := t.st.addHold(h); err != nil {
		return nil, err
	}
	return h, nil
}

// addHold adds h to the live holds (unwatched), unless the session has
// ended (ErrSessionEnded, with the session's cause).
func (st *state) addHold(h *Hold) error {
	st.holdMu.Lock()
	defer st.holdMu.Unlock()
	if err := st.endCause; err != nil {
		return &endedError{err}
	}
	if st.holds == nil {
		st.holds = make(map[*Hold]bool)
	}
	st.holds[h] = false
	return nil
}

// Key returns the held entry's key.
func (h *Hold) Key() string { return h.t.Key }

// Rev returns the held entry's create revision: its fencing token.
func (h *Hold) Rev() int64 { return h.t.Rev }

// Owned returns a Cmp that holds only while the entry's key exists with
// its create revision, for etcd writes conditional on the hold.
func (h *Hold) Owned() clientv3.Cmp { return h.t.Owned() }

// Done returns a channel closed when the hold ends. The first call has the
// session check the key at each heartbeat.
func (h *Hold) Done() <-chan struct{} {
	h.watchOnce.Do(func() { h.t.st.watch(h) })
	return h.done
}

// watch has h's key checked at each heartbeat (checkHolds), if h is live.
func (st *state) watch(h *Hold) {
	st.holdMu.Lock()
	defer st.holdMu.Unlock()
	if _, ok := st.holds[h]; ok {
		st.holds[h] = true
	}
}

// Err returns nil while the hold looks live, then why it ended:
// ErrReleased, ErrEntryGone, or ErrSessionEnded (also matching the
// session's Err).
func (h *Hold) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Queued reports whether an entry preceded this one at its enqueue (it
// had to wait).
func (h *Hold) Queued() bool { return h.t.queued }

// Ahead returns how many entries preceded this one at its enqueue where
// the enqueue reads that anyway (a semaphore's), else -1: an exact count
// for a lock would cost one more read per acquire.
func (h *Hold) Ahead() int64 { return h.t.ahead }

// OnEnd arranges for f to be called once, with the cause (as Err), when
// the hold ends; at once if it has already ended. f runs synchronously in
// the goroutine that ends the hold (perhaps the session's, before its Done
// closes): it must be quick. Call it once, right after the grant.
func (h *Hold) OnEnd(f func(cause error)) {
	h.mu.Lock()
	err := h.err
	if err == nil {
		h.onEnd = f
	}
	h.mu.Unlock()
	if err != nil {
		f(err)
	}
}

// end ends the hold with err, once.
func (h *Hold) end(err error) {
	h.mu.Lock()
	if h.err != nil {
		h.mu.Unlock()
		return
	}
	h.err = err
	close(h.done)
	f := h.onEnd
	h.mu.Unlock()
	if f != nil {
		f(err)
	}
}

// keyMissing ends the hold because the heartbeat's check found its key
// deleted (no longer bound to the lease), unless a Release's delete is in
// flight or done (the deletion may be Release's own: Release decides).
func (h *Hold) keyMissing() {
	h.t.st.unwatch(h)
	h.mu.Lock()
	if h.releasing || h.released { // released: Release is about to end it
		h.missingSeen = true
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	h.end(ErrEntryGone)
}

// unwatch stops the check of h's key.
func (st *state) unwatch(h *Hold) {
	st.holdMu.Lock()
	defer st.holdMu.Unlock()
	if _, ok := st.holds[h]; ok {
		st.holds[h] = false
	}
}

// detach takes the hold off its session's state. Call it once the hold has
// ended.
func (h *Hold) detach() {
	h.watchOnce.Do(func() {}) // not checked from now on
	h.t.st.dropHold(h)
}

// dropHold removes h, which has ended, from the live holds.
func (st *state) dropHold(h *Hold) {
	st.holdMu.Lock()
	defer st.holdMu.Unlock()
	delete(st.holds, h)
}

// Release ends the hold by deleting the key, guarded by its create
// revision so that it never deletes a later entry, and returns nil; later
// calls return nil again. If the hold had already ended it returns Err()
// without I/O (the key is gone, or goes with the lease). If the key turns
// out to be gone, the hold ends with ErrEntryGone, which Release returns.
// If the delete fails (ctx, network), Release returns that error, the
// hold stays as it was, and Release may be retried.
func (h *Hold) Release(ctx context.Context) error {
	h.releaseMu.Lock()
	defer h.releaseMu.Unlock()
	if err := h.Err(); err != nil {
		h.detach()
		h.mu.Lock()
		ok := h.released
		h.mu.Unlock()
		if ok {
			return nil
		}
		return err
	}
	h.mu.Lock()
	h.releasing = true
	h.mu.Unlock()
	deleted, err := h.q.leave(ctx, h.t)
	h.mu.Lock()
	h.releasing = false
	missingSeen := h.missingSeen
	if err == nil && deleted {
		h.released = true
	}
	h.mu.Unlock()
	switch {
	case err != nil:
		if missingSeen { // the heartbeat found the key missing: the hold must end here
			h.end(ErrEntryGone)
		}
		return err
	case !deleted:
		h.end(ErrEntryGone)
	default:
		h.end(ErrReleased)
	}
	h.detach()
	if deleted {
		return nil
	}
	return h.Err()
}

// leave deletes t's entry if it is still the same key (a delete guarded by
// its create revision, which never removes a later entry) and frees its
// name. It reports whether it deleted the entry; false means it was gone.
func (q *Queue) leave(ctx context.Context, t ticket) (bool, error) {
	if fault.Planted(fault.UnguardedRelease) {
		return q.removeHead(ctx, t) // the plant (plant.go): the queue's first entry instead
	}
	deleted, err := q.remove(ctx, t.entry)
	if err != nil {
		return false, err
	}
	t.st.freeSlot(t.slot)
	return deleted, nil
}

// remove deletes e (and its side keys) if it is still the same key (same
// create revision). It reports whether a key was deleted.
func (q *Queue) remove(ctx context.Context, e entry) (bool, error) {
	resp, err := q.kv.Txn(ctx).If(e.Owned()).Then(q.deletes(e.Key)...).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// deletes are the deletes of the entry whose key is key and of its side
// keys.
func (q *Queue) deletes(key string) []clientv3.Op {
	ops := []clientv3.Op{clientv3.OpDelete(key)}
	for _, k := range q.rule.sideKeys(q, key) {
		ops = append(ops, clientv3.OpDelete(k))
	}
	return ops
}
