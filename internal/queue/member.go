package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	leftovers map[string]bool  // keys whose removal failed; their names are retired
	epochs    map[string]epoch // queue prefix → the session's epoch there
}

// epoch is the session's epoch for one queue (see Late writes): the mod
// revision its enqueues compare the epoch key with (0: no key), and
// whether a cleanup failed to move it.
type epoch struct {
	rev   int64
	dirty bool
}

// epoch returns the session's epoch for the queue with prefix.
func (p *slotPool) epoch(prefix string) (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.epochs[prefix]
	return e.rev, e.dirty
}

// setEpoch records that the epoch key was seen or put at mod revision rev
// (0: the key is gone), which clears dirtiness; an older rev than the one
// recorded is ignored. It returns the revision recorded.
func (p *slotPool) setEpoch(prefix string, rev int64) int64 {
	return p.updateEpoch(prefix, func(e *epoch) {
		if rev > e.rev || rev == 0 {
			e.rev = rev
		}
		e.dirty = false
	})
}

// markDirty records that a cleanup could not move the epoch.
func (p *slotPool) markDirty(prefix string) {
	p.updateEpoch(prefix, func(e *epoch) { e.dirty = true })
}

func (p *slotPool) updateEpoch(prefix string, f func(*epoch)) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.epochs == nil {
		p.epochs = make(map[string]epoch)
	}
	e := p.epochs[prefix]
	f(&e)
	p.epochs[prefix] = e
	return e.rev
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

// errNoProgress: every try of a Join or TryJoin lost a race (the epoch
// moved, a stray key of the session held the name).
var errNoProgress = errors.New("no progress")

func (q Queue) ticket(p *slotPool) Ticket {
	slot := p.get()
	return Ticket{Entry: Entry{Key: q.Prefix + p.lease + strconv.FormatUint(slot, 10)}, pool: p, slot: slot}
}

// maxTries bounds the tries of one Join or TryJoin.
const maxTries = 8

// Late writes.
//
// A request that failed with an unknown outcome (a timeout; a member that
// was paused with the request in hand forwards it when it resumes) can
// still be applied after the acquire gave up and deleted its key. An
// enqueue applied that late would leave an entry bound to the still-live
// session that nobody waits on: it would hold the queue for every client
// until the session ends. So every enqueue also compares the mod revision
// of the session's epoch key for the queue (epochKey), and the cleanup
// after an unknown outcome puts that key and deletes the entry in one
// transaction: an enqueue applied before the cleanup is deleted by it, one
// applied after fails its compare. If that cleanup fails too, the queue is
// marked dirty and the session's next enqueue moves the epoch first.

// epochKey is the session's epoch key for q: beside the queue's prefix,
// never inside any queue's (names never contain "%").
func (q Queue) epochKey(p *slotPool) string {
	return strings.TrimSuffix(q.Prefix, "/") + "%epoch/" + strings.TrimSuffix(p.lease, "-")
}

// prepare moves the epoch if an earlier cleanup could not, then deletes
// leftover keys; it returns the epoch to compare with.
func (q Queue) prepare(ctx context.Context, s *session.Session, p *slotPool) (int64, error) {
	epoch, dirty := p.epoch(q.Prefix)
	if dirty {
		resp, err := q.Client.Put(ctx, q.epochKey(p), "", clientv3.WithLease(s.Lease()))
		if err != nil {
			return 0, fmt.Errorf("moving the epoch of queue %s: %w", q.Prefix, err)
		}
		epoch = p.setEpoch(q.Prefix, resp.Header.Revision)
	}
	return epoch, p.sweep(ctx, q.Client)
}

// Join creates an entry holding val at the end of the queue, bound to s's
// lease, and returns it with its predecessor at that moment (nil: the entry
// is first), in one round trip. On error nothing is left behind (the key
// is removed with a detached, bounded context, and an enqueue applied
// later is void: see Late writes).
func (q Queue) Join(ctx context.Context, s *session.Session, val string) (Ticket, *mvccpb.KeyValue, error) {
	p := poolFor(s)
	t := q.ticket(p)
	ek := q.epochKey(p)
	for range maxTries {
		epoch, err := q.prepare(ctx, s, p)
		if err != nil {
			p.put(t.slot)
			return Ticket{}, nil, err
		}
		resp, err := q.Client.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(t.Key), "=", 0),
			clientv3.Compare(clientv3.ModRevision(ek), "=", epoch),
		).Then(
			clientv3.OpGet(q.Prefix, clientv3.WithLastCreate()...),
			clientv3.OpPut(t.Key, val, clientv3.WithLease(s.Lease())),
		).Commit()
		if err != nil {
			return Ticket{}, nil, withCleanup(err, t, q.abandon(ctx, s, t, true))
		}
		if resp.Succeeded {
			t.Rev = resp.Header.Revision
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
				return t, kvs[0], nil
			}
			return t, nil, nil
		}
		// Rare: read why in a second request rather than carry an Else
		// branch in every enqueue.
		if resp, err = q.Client.Txn(ctx).Then(
			clientv3.OpGet(ek, clientv3.WithKeysOnly()),
			clientv3.OpGet(t.Key, clientv3.WithKeysOnly()),
		).Commit(); err != nil {
			p.put(t.slot)
			return Ticket{}, nil, err
		}
		if err := q.lostRace(ctx, t, epoch, resp); err != nil {
			return Ticket{}, nil, err
		}
	}
	p.put(t.slot)
	return Ticket{}, nil, fmt.Errorf("queue %s: join: %d tries: %w", q.Prefix, maxTries, errNoProgress)
}

// lostRace handles a failed compare of an enqueue, given a read (resp) of
// the epoch key and the ticket's key. It adopts a moved epoch, and deletes
// a key under the ticket's name (the session's own, left by a write that
// was applied late or retried by the client: nobody else uses the name),
// guarded by its create revision. The caller tries again.
func (q Queue) lostRace(ctx context.Context, t Ticket, epoch int64, resp *clientv3.TxnResponse) error {
	q.adoptEpoch(t.pool, epoch, resp.Responses[0].GetResponseRange().Kvs)
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		if _, err := q.Remove(ctx, Entry{Key: t.Key, Rev: kvs[0].CreateRevision}); err != nil {
			t.pool.retire(t.Key)
			return fmt.Errorf("queue %s: removing stray key %q: %w", q.Prefix, t.Key, err)
		}
	}
	return nil
}

// adoptEpoch records the epoch key as read (kvs), if it moved from epoch;
// it reports whether it had.
func (q Queue) adoptEpoch(p *slotPool, epoch int64, kvs []*mvccpb.KeyValue) bool {
	rev := int64(0)
	if len(kvs) > 0 {
		rev = kvs[0].ModRevision
	}
	if rev == epoch {
		return false
	}
	p.setEpoch(q.Prefix, rev)
	return true
}

// TryJoin creates an entry only if the queue is empty, in one round trip
// (a Txn whose compare covers the whole prefix). If the queue is not empty
// it returns ok=false, creates nothing, and holder is the first entry.
func (q Queue) TryJoin(ctx context.Context, s *session.Session, val string) (t Ticket, holder *mvccpb.KeyValue, ok bool, err error) {
	p := poolFor(s)
	t = q.ticket(p)
	ek := q.epochKey(p)
	for range maxTries {
		epoch, err := q.prepare(ctx, s, p)
		if err != nil {
			p.put(t.slot)
			return Ticket{}, nil, false, err
		}
		resp, err := q.Client.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(q.Prefix), "=", 0).WithPrefix(),
			clientv3.Compare(clientv3.ModRevision(ek), "=", epoch),
		).Then(
			clientv3.OpPut(t.Key, val, clientv3.WithLease(s.Lease())),
		).Else(
			clientv3.OpGet(ek, clientv3.WithKeysOnly()),
			clientv3.OpGet(t.Key, clientv3.WithKeysOnly()),
			clientv3.OpGet(q.Prefix, clientv3.WithFirstCreate()...),
		).Commit()
		if err != nil {
			return Ticket{}, nil, false, withCleanup(err, t, q.abandon(ctx, s, t, true))
		}
		if resp.Succeeded {
			t.Rev = resp.Header.Revision
			return t, nil, true, nil
		}
		stray := len(resp.Responses[1].GetResponseRange().Kvs) > 0
		if !stray && !q.adoptEpoch(p, epoch, resp.Responses[0].GetResponseRange().Kvs) {
			// The epoch held and the queue holds another entry.
			p.put(t.slot)
			if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 {
				holder = kvs[0]
			}
			return Ticket{}, holder, false, nil
		}
		if err := q.lostRace(ctx, t, epoch, resp); err != nil {
			return Ticket{}, nil, false, err
		}
	}
	p.put(t.slot)
	return Ticket{}, nil, false, fmt.Errorf("queue %s: try join: %d tries: %w", q.Prefix, maxTries, errNoProgress)
}

// AbandonAfter abandons t after the failure err and returns err, with the
// cleanup's own failure appended to the message if it failed.
func (q Queue) AbandonAfter(ctx context.Context, s *session.Session, t Ticket, err error) error {
	return withCleanup(err, t, q.Abandon(ctx, s, t))
}

func withCleanup(err error, t Ticket, cerr error) error {
	if cerr != nil {
		return fmt.Errorf("%w (and removing key %q failed: %v)", err, t.Key, cerr)
	}
	return err
}

// Abandon removes t's key after a cancelled or failed acquire, with a
// context detached from ctx and bounded by CleanupTimeout, and frees its
// name. While t is held no other attempt uses its name, so the unguarded
// delete can only remove t's own entry. If the delete fails, the key is
// kept as a leftover that the session's next Join or TryJoin deletes
// first. If s has ended, Abandon does nothing: the key goes with the lease
// (whose heartbeats have stopped), and etcd may well be unreachable; so
// does a late enqueue.
func (q Queue) Abandon(ctx context.Context, s *session.Session, t Ticket) error {
	return q.abandon(ctx, s, t, false)
}

// abandon is Abandon; unknown says t's enqueue failed with an unknown
// outcome, so that it may still be applied (see Late writes): the same
// transaction then also moves the session's epoch for the queue, and if it
// fails the queue is marked dirty.
func (q Queue) abandon(ctx context.Context, s *session.Session, t Ticket, unknown bool) error {
	select {
	case <-s.Done():
		return nil
	default:
	}
	ops := []clientv3.Op{clientv3.OpDelete(t.Key)}
	if unknown {
		ops = append(ops, clientv3.OpPut(q.epochKey(t.pool), "", clientv3.WithLease(s.Lease())))
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
	defer cancel()
	resp, err := q.Client.Txn(cctx).Then(ops...).Commit()
	if err != nil {
		if unknown {
			t.pool.markDirty(q.Prefix)
		}
		t.pool.retire(t.Key) // the next Join retries; the lease's end removes it anyway
		return err
	}
	if unknown {
		t.pool.setEpoch(q.Prefix, resp.Header.Revision)
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
