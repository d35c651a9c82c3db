package election

import (
	"context"
	"errors"
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
	h  *queue.Hold

	mu    sync.Mutex
	value string
}

// Epoch returns the term's epoch: the create revision of the leader's key.
// Successive leaders of one election have strictly increasing epochs.
func (t *Term) Epoch() uint64 { return uint64(t.h.Rev()) }

// Token returns the term's fencing token: the election's name and the
// epoch.
func (t *Term) Token() fence.Token { return fence.Token{Name: t.el.path.Name, Seq: t.Epoch()} }

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
func (t *Term) IsLeader() clientv3.Cmp { return t.h.Owned() }

// Done returns a channel closed when the term ends: at the session's local
// deadline (or when its lease is reported gone, or it is closed), before
// the session's own Done closes; when the leader's key is observed deleted;
// or on Resign. From the first call on, the session checks the key at each
// heartbeat: a deletion closes Done within one heartbeat interval.
func (t *Term) Done() <-chan struct{} { return t.h.Done() }

// Err returns nil while the term looks live; after that, why it ended: an
// error matching ErrLeadershipLost and the session's error (session ended)
// or ErrKeyDeleted (key deleted), or an error matching ErrResigned.
func (t *Term) Err() error { return t.err("", t.h.Err()) }

func (t *Term) err(op string, err error) error {
	return sentinels.Op(t.el.path.Name, op, true, err)
}

// Proclaim sets the leader's value, with a put guarded by the key's create
// revision: it never writes another candidate's key. If the term has ended
// it returns Err() (matching ErrLeadershipLost or ErrResigned) without any
// I/O; if the key turns out to be gone, the term ends and Proclaim returns
// an error matching ErrLeadershipLost and ErrKeyDeleted.
func (t *Term) Proclaim(ctx context.Context, value string) error {
	if err := t.h.Err(); err != nil {
		return t.err("proclaim", err)
	}
	resp, err := t.el.path.Client.Txn(ctx).If(t.h.Owned()).Then(
		clientv3.OpPut(t.h.Key(), value, clientv3.WithIgnoreLease()),
	).Commit()
	if err != nil {
		return t.err("proclaim", err)
	}
	if !resp.Succeeded {
		// The key is gone: Release finds that out and ends the term.
		if err := t.h.Release(ctx); err != nil && !errors.Is(err, queue.ErrEntryGone) {
			return t.err("proclaim", err)
		}
		return t.err("proclaim", queue.ErrEntryGone)
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
	return t.err("resign", t.h.Release(ctx))
}
