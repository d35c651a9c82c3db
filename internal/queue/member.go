package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/session"
)

// Key names and etcd tombstones.
//
// etcd keeps a deleted key in its index until the next compaction, and a
// range over the queue's prefix walks every such key. A fresh key name per
// attempt (as etcd's own Mutex avoids by using one name per session) would
// make every acquire slower than the last until compaction. So an attempt's
// key name is the session's lease plus a slot number that is unique among
// the session's live attempts and is reused once an attempt is over:
// sequential attempts of one session reuse one name, concurrent attempts
// get distinct ones. Reuse is safe because every check and delete of an
// entry is guarded by its create revision, never by its name alone.

type slotPool struct {
	lease     string // the lease in hex: every key name's stem
	mu        sync.Mutex
	free      []uint64
	next      uint64
	leftovers map[string]bool // keys whose removal failed; their names are retired
}

// retire records key, whose removal failed, as a leftover: its name is
// never handed out again, and the session's next Join retries the delete.
func (p *slotPool) retire(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leftovers == nil {
		p.leftovers = make(map[string]bool)
	}
	p.leftovers[key] = true
}

// sweep deletes the session's leftover keys, so that a failed cleanup does
// not leave the session queued behind its own key until the lease ends.
// Failures are kept for the next sweep.
func (p *slotPool) sweep(ctx context.Context, cli *clientv3.Client) error {
	p.mu.Lock()
	keys := make([]string, 0, len(p.leftovers))
	for k := range p.leftovers {
		keys = append(keys, k)
	}
	p.mu.Unlock()
	for _, k := range keys {
		if _, err := cli.Delete(ctx, k); err != nil {
			return fmt.Errorf("removing leftover key %q: %w", k, err)
		}
		p.mu.Lock()
		delete(p.leftovers, k)
		p.mu.Unlock()
	}
	return nil
}

var pools sync.Map // clientv3.LeaseID → *slotPool

func poolFor(s *session.Session) *slotPool {
	if p, ok := pools.Load(s.Lease()); ok {
		return p.(*slotPool)
	}
	p, loaded := pools.LoadOrStore(s.Lease(), &slotPool{lease: fmt.Sprintf("%016x-", int64(s.Lease()))})
	if !loaded {
		lease := s.Lease()
		s.AfterDone(func() { pools.Delete(lease) })
	}
	return p.(*slotPool)
}

func (p *slotPool) get() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		slot := p.free[n-1]
		p.free = p.free[:n-1]
		return slot
	}
	p.next++
	return p.next - 1
}

func (p *slotPool) put(slot uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free = append(p.free, slot)
}

// ErrSessionEnded is the cause of a context from BindSession that was
// cancelled because the session ended.
var ErrSessionEnded = errors.New("session ended")

// BindSession returns a copy of ctx that is also cancelled, with cause
// ErrSessionEnded, when s ends: an acquire bound to it stops every read,
// write and watch the moment the session's Done closes, even while etcd is
// unreachable. Call cancel when done.
func BindSession(ctx context.Context, s *session.Session) (context.Context, context.CancelFunc) {
	bctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.Context(), func() { cancel(ErrSessionEnded) })
	return bctx, func() { stop(); cancel(nil) }
}

// SessionEnded reports whether ctx, from BindSession, ended because the
// session did.
func SessionEnded(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), ErrSessionEnded)
}

// Ticket is a session's claim on one key name of a queue, from Join or
// TryJoin until Leave or Abandon.
type Ticket struct {
	Entry
	pool *slotPool
	slot uint64
}

// errNameTaken: the slot's key name exists (an entry whose removal failed
// and which will go with the lease); the slot is retired.
var errNameTaken = errors.New("key name taken")

func (q Queue) ticket(p *slotPool) Ticket {
	slot := p.get()
	return Ticket{Entry: Entry{Key: q.Prefix + p.lease + strconv.FormatUint(slot, 10)}, pool: p, slot: slot}
}

// maxNameTries bounds the retries over slots whose names are taken.
const maxNameTries = 8

// Join creates an entry holding val at the end of the queue, bound to s's
// lease, and returns it with its predecessor at that moment (nil: the entry
// is first), in one round trip. On error nothing is left behind (the key
// is removed with a detached, bounded context).
func (q Queue) Join(ctx context.Context, s *session.Session, val string) (Ticket, *mvccpb.KeyValue, error) {
	p := poolFor(s)
	if err := p.sweep(ctx, q.Client); err != nil {
		return Ticket{}, nil, err
	}
	for range maxNameTries {
		t := q.ticket(p)
		resp, err := q.Client.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(t.Key), "=", 0),
		).Then(
			clientv3.OpGet(q.Prefix, clientv3.WithLastCreate()...),
			clientv3.OpPut(t.Key, val, clientv3.WithLease(s.Lease())),
		).Commit()
		if err != nil {
			return Ticket{}, nil, q.AbandonAfter(ctx, s, t, err)
		}
		if !resp.Succeeded {
			continue // retire the slot: its name belongs to a leftover entry
		}
		t.Rev = resp.Header.Revision
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			return t, kvs[0], nil
		}
		return t, nil, nil
	}
	return Ticket{}, nil, fmt.Errorf("queue %s: %d key names of lease %x taken: %w", q.Prefix, maxNameTries, int64(s.Lease()), errNameTaken)
}

// TryJoin creates an entry only if the queue is empty, in one round trip
// (a Txn whose compare covers the whole prefix). If the queue is not empty
// it returns ok=false, creates nothing, and holder is the first entry.
func (q Queue) TryJoin(ctx context.Context, s *session.Session, val string) (t Ticket, holder *mvccpb.KeyValue, ok bool, err error) {
	p := poolFor(s)
	if err := p.sweep(ctx, q.Client); err != nil {
		return Ticket{}, nil, false, err
	}
	t = q.ticket(p)
	resp, err := q.Client.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(q.Prefix), "=", 0).WithPrefix(),
	).Then(
		clientv3.OpPut(t.Key, val, clientv3.WithLease(s.Lease())),
	).Else(
		clientv3.OpGet(q.Prefix, clientv3.WithFirstCreate()...),
	).Commit()
	if err != nil {
		return Ticket{}, nil, false, q.AbandonAfter(ctx, s, t, err)
	}
	if !resp.Succeeded {
		t.pool.put(t.slot)
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			holder = kvs[0]
		}
		return Ticket{}, holder, false, nil
	}
	t.Rev = resp.Header.Revision
	return t, nil, true, nil
}

// AbandonAfter abandons t after the failure err and returns err, with the
// cleanup's own failure appended to the message if it failed.
func (q Queue) AbandonAfter(ctx context.Context, s *session.Session, t Ticket, err error) error {
	if aerr := q.Abandon(ctx, s, t); aerr != nil {
		return fmt.Errorf("%w (and removing key %q failed: %v)", err, t.Key, aerr)
	}
	return err
}

// Abandon removes t's key after a cancelled or failed acquire, with a
// context detached from ctx and bounded by CleanupTimeout, and frees its
// name. While t is held no other attempt uses its name, so the unguarded
// delete can only remove t's own entry. If the delete fails, the key is
// kept as a leftover that the session's next Join or TryJoin deletes
// first. If s has ended, Abandon does nothing: the key goes with the lease
// (whose heartbeats have stopped), and etcd may well be unreachable.
func (q Queue) Abandon(ctx context.Context, s *session.Session, t Ticket) error {
	select {
	case <-s.Done():
		return nil
	default:
	}
	if err := q.Cleanup(ctx, t.Key); err != nil {
		t.pool.retire(t.Key) // the next Join retries; the lease's end removes it anyway
		return err
	}
	t.pool.put(t.slot)
	return nil
}

// Leave deletes t's entry if it is still the same key (a delete guarded by
// its create revision, which never removes a later entry) and frees its
// name. It reports whether it deleted the entry; false means it was gone.
func (q Queue) Leave(ctx context.Context, t Ticket) (bool, error) {
	deleted, err := q.Remove(ctx, t.Entry)
	if err != nil {
		return false, err
	}
	t.pool.put(t.slot)
	return deleted, nil
}
