package election

import (
	"context"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/queue"
)

// Term is one leadership term: what Campaign returns once elected. It is
// safe for concurrent use.
//
// It is NOT safe to assume that leadership lasts until Resign: a pause, a
// partition or a session expiry can end it at any moment. Stop acting when
// Done closes, and pass Token to the resources the leader writes to, so that
// a write after the term ended is rejected there.
type Term struct {
	el *Election
	e  queue.Entry

	watchOnce   sync.Once
	cancelWatch context.CancelFunc // stops the watcher; nil if none started
	watchDone   chan struct{}

	resignMu sync.Mutex // serialises Resign calls

	mu        sync.Mutex
	value     string
	done      chan struct{}
	err       error
	resigned  bool
	resigning bool // a Resign's delete is in flight: a deletion may be ours
	goneSeen  bool // the watcher saw the key deleted while resigning
}

// Epoch returns the term's epoch: the create revision of the leader's key.
// Successive leaders of one election have strictly increasing epochs.
func (t *Term) Epoch() uint64 { return uint64(t.e.Rev) }

// Token returns the term's fencing token: the election's name and the
// epoch.
func (t *Term) Token() fence.Token { return fence.Token{Name: t.el.name, Seq: t.Epoch()} }

// Key returns the leader's etcd key.
func (t *Term) Key() string { return t.e.Key }

// Value returns the value the leader campaigned with or last proclaimed.
func (t *Term) Value() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.value
}

// IsLeader returns a comparison that holds only while this term's key
// exists, for etcd transactions that must commit only under this
// leadership:
//
//	cli.Txn(ctx).If(t.IsLeader()).Then(clientv3.OpPut(k, v)).Commit()
func (t *Term) IsLeader() clientv3.Cmp { return t.e.Owned() }

// Done returns a channel closed when the term ends: at the session's local
// deadline (or when its lease is reported gone, or it is closed), when the
// leader's key is observed deleted, or on Resign. The first call starts one
// watch on the key, which ends with the term (Resign, step-down, or the
// session's end).
func (t *Term) Done() <-chan struct{} {
	t.watchOnce.Do(t.startWatch)
	return t.done
}

// Err returns nil while the term looks live; after that, why it ended: an
// error matching ErrLeadershipLost and the session's error (session ended)
// or ErrKeyDeleted (key deleted), or an error matching ErrResigned.
func (t *Term) Err() error {
	t.mu.Lock()
	err := t.err
	t.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case <-t.el.s.Done():
		t.end(t.lostBySession())
		return t.Err()
	default:
		return nil
	}
}

func (t *Term) lostBySession() error {
	return fmt.Errorf("election %q: epoch %d: %w: %w", t.el.name, t.Epoch(), ErrLeadershipLost, t.el.s.Err())
}

func (t *Term) lostByDelete() error {
	return fmt.Errorf("election %q: epoch %d: %w: %w", t.el.name, t.Epoch(), ErrLeadershipLost, ErrKeyDeleted)
}

func (t *Term) end(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = err
		close(t.done)
	}
}

func (t *Term) startWatch() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.cancelWatch, t.watchDone = cancel, make(chan struct{})
	go func() {
		defer close(t.watchDone)
		if t.el.q.WatchGone(ctx, t.e, t.e.Rev+1, t.el.s.Done()) {
			t.mu.Lock()
			if t.resigning { // maybe our own delete: Resign decides
				t.goneSeen = true
				t.mu.Unlock()
				return
			}
			t.mu.Unlock()
			t.end(t.lostByDelete())
			return
		}
		select {
		case <-t.el.s.Done():
			t.end(t.lostBySession())
		default: // stopped by Resign or a failed Proclaim
		}
	}()
}

// stopWatch stops the watcher goroutine, if one runs, and waits for it.
func (t *Term) stopWatch() {
	t.watchOnce.Do(func() {}) // no watcher may start from now on
	t.mu.Lock()
	cancel, done := t.cancelWatch, t.watchDone
	t.cancelWatch = nil
	t.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// Proclaim sets the leader's value, with a put guarded by the key's create
// revision: it never writes another candidate's key. If the term has ended
// it returns Err() (matching ErrLeadershipLost or ErrResigned) without any
// I/O; if the key turns out to be gone, the term ends and Proclaim returns
// an error matching ErrLeadershipLost and ErrKeyDeleted.
func (t *Term) Proclaim(ctx context.Context, value string) error {
	if err := t.Err(); err != nil {
		return err
	}
	ok, err := t.el.q.Update(ctx, t.e, value)
	if err != nil {
		return t.el.wrap(ctx, "proclaim", err)
	}
	if !ok {
		lost := t.lostByDelete()
		t.end(lost)
		t.stopWatch()
		return t.Err()
	}
	t.mu.Lock()
	t.value = value
	t.mu.Unlock()
	return nil
}

// Resign ends the term by deleting the leader's key with a delete guarded
// by its create revision, so it never deletes a later leader's key; the next
// candidate is elected at once. If the term had already ended (session
// ended, key deleted) it returns Err(), matching ErrLeadershipLost, without
// any I/O: the key is gone or its lease is about to expire. After a
// successful Resign, Err matches ErrResigned and later calls return nil.
func (t *Term) Resign(ctx context.Context) error {
	t.resignMu.Lock()
	defer t.resignMu.Unlock()
	t.mu.Lock()
	resigned := t.resigned
	t.mu.Unlock()
	if resigned {
		return nil
	}
	if err := t.Err(); err != nil {
		t.stopWatch()
		return err
	}
	t.mu.Lock()
	t.resigning = true
	t.mu.Unlock()
	deleted, err := t.el.q.Remove(ctx, t.e)
	t.mu.Lock()
	t.resigning = false
	goneSeen := t.goneSeen
	t.mu.Unlock()
	if err != nil {
		if goneSeen { // the watcher has exited: the term must end here
			t.end(t.lostByDelete())
		}
		return t.el.wrap(ctx, "resign", err)
	}
	if !deleted {
		t.end(t.lostByDelete())
		t.stopWatch()
		return t.Err()
	}
	t.mu.Lock()
	t.resigned = true
	t.mu.Unlock()
	t.end(fmt.Errorf("election %q: epoch %d: %w", t.el.name, t.Epoch(), ErrResigned))
	t.stopWatch()
	return nil
}
