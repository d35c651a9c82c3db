package queue

import (
	"context"
	"sync"

	"github.com/dlock-go/dlock/session"
)

// Hold is the life of a granted entry (a lock grant, a leadership term):
// it ends when the session ends (synchronously, before the session's own
// Done closes), when the entry's key is deleted (seen by a watch started on
// the first call to Done), or on Release. It is safe for concurrent use.
type Hold struct {
	q Queue
	s *session.Session
	t Ticket

	lostBySession func() error // the error when the session ends
	lostByDelete  func() error // the error when the key is deleted

	stopHook    func() bool // unregisters the session AfterDone hook
	watchOnce   sync.Once
	cancelWatch context.CancelFunc // stops the watcher; nil if none started
	watchDone   chan struct{}

	releaseMu sync.Mutex // serialises Release

	mu        sync.Mutex
	done      chan struct{}
	err       error
	released  bool // Release deleted the key
	releasing bool // a Release's delete is in flight: a deletion may be ours
	goneSeen  bool // the watcher saw the key deleted while releasing
}

// NewHold starts the hold of ticket t, granted on session s. If the session
// has already ended, the hold is ended at once (check Err).
func NewHold(q Queue, s *session.Session, t Ticket, lostBySession, lostByDelete func() error) *Hold {
	h := &Hold{q: q, s: s, t: t, lostBySession: lostBySession, lostByDelete: lostByDelete, done: make(chan struct{})}
	h.stopHook = s.AfterDone(func() { h.End(h.lostBySession()) })
	return h
}

// Ticket returns the held entry.
func (h *Hold) Ticket() Ticket { return h.t }

// Done returns a channel closed when the hold ends. The first call starts
// the watch on the key.
func (h *Hold) Done() <-chan struct{} {
	h.watchOnce.Do(h.startWatch)
	return h.done
}

// Err returns nil while the hold looks live, then why it ended.
func (h *Hold) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// End ends the hold with err, once.
func (h *Hold) End(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		h.err = err
		close(h.done)
	}
}

func (h *Hold) startWatch() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return
	}
	// The watch ends with the session (whose end the AfterDone hook
	// reports) or with Release.
	ctx, cancel := context.WithCancel(h.s.Context())
	h.cancelWatch, h.watchDone = cancel, make(chan struct{})
	go func() {
		defer close(h.watchDone)
		if !h.q.WatchGone(ctx, h.t.Entry, h.t.Rev+1) {
			return
		}
		h.mu.Lock()
		if h.releasing { // maybe Release's own delete: Release decides
			h.goneSeen = true
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		h.End(h.lostByDelete())
	}()
}

// Stop stops the watcher, if one runs, waits for it, and unregisters the
// session hook. Call it once the hold has ended.
func (h *Hold) Stop() {
	h.stopHook()
	h.watchOnce.Do(func() {}) // no watcher may start from now on
	h.mu.Lock()
	cancel, done := h.cancelWatch, h.watchDone
	h.cancelWatch = nil
	h.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// Release ends the hold by deleting the key, guarded by its create
// revision so that it never deletes a later entry. It returns nil and ends
// the hold with released on success, and nil again on later calls. If the
// hold had already ended it returns Err() without I/O (the key is gone, or
// goes with the lease). If the key turns out to be gone it ends the hold
// with lostByDelete and returns that. If the delete fails (ctx, network),
// it returns that error and Release may be retried.
func (h *Hold) Release(ctx context.Context, released error) error {
	h.releaseMu.Lock()
	defer h.releaseMu.Unlock()
	if err := h.Err(); err != nil {
		h.Stop()
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
	deleted, err := h.q.Leave(ctx, h.t)
	h.mu.Lock()
	h.releasing = false
	goneSeen := h.goneSeen
	if err == nil && deleted {
		h.released = true
	}
	h.mu.Unlock()
	switch {
	case err != nil:
		if goneSeen { // the watcher has exited: the hold must end here
			h.End(h.lostByDelete())
		}
		return err
	case !deleted:
		h.End(h.lostByDelete())
	default:
		h.End(released)
	}
	h.Stop()
	if deleted {
		return nil
	}
	return h.Err()
}
