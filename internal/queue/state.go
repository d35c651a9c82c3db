package queue

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/internal/retry"
)

// state is one session's queue state, shared by all its queues: the key
// names in use (see "Key names" in doc.go), the leftovers of failed
// cleanups, its epoch in each queue (see "Late writes"), and its live
// holds. It is the session's attachment: the session runs its Heartbeat
// (the check of the held keys, and the sweeps) after each acknowledged
// keepalive, and its End when it ends, which ends every hold. It lives and
// dies with the Session value: two sessions never share it, even with the
// same lease ID on two clusters.
type state struct {
	lease string // the lease in hex: every key name's stem
	id    clientv3.LeaseID
	cli   *clientv3.Client
	kv    retry.KV

	mu        sync.Mutex
	free      []uint64
	next      uint64
	busy      map[uint64]struct{} // slots handed out to an attempt and not yet released or retired
	leftovers map[string]bool     // keys whose removal failed; their names are retired
	epochs    map[string]epoch    // queue prefix → the session's epoch there

	holdMu sync.Mutex
	holds  map[*Hold]bool // live holds → whether to check its key at each heartbeat (its Done was called)
	ended  error          // the session's end, once End ran

	ctx    context.Context // cancelled, with the session's cause, when it ends
	cancel context.CancelCauseFunc
}

// epoch is the session's epoch for one queue: the mod revision its
// enqueues compare the epoch key with (0: no key), and whether a cleanup
// failed to move it.
type epoch struct {
	rev   int64
	dirty bool
}

type stateKey struct{}

// stateOf returns s's state, attaching it on first use.
func stateOf(s Session) *state {
	return s.Attach(stateKey{}, func() Attachment {
		ctx, cancel := context.WithCancelCause(context.Background())
		return &state{
			lease: fmt.Sprintf("%016x", int64(s.Lease())), id: s.Lease(), cli: s.Client(), kv: retry.NewKV(s.Client()),
			ctx: ctx, cancel: cancel,
		}
	}).(*state)
}

// Heartbeat is the session's call after each acknowledged keepalive: the
// check of the watched holds' keys, and the sweeps.
func (st *state) Heartbeat(ctx context.Context) { st.check(ctx) }

// End is the session's call when it ends: every live hold ends, with the
// session's cause, and the state's context is cancelled.
func (st *state) End(err error) {
	defer st.cancel(err)
	st.holdMu.Lock()
	st.ended = err
	holds := st.holds
	st.holds = nil
	st.holdMu.Unlock()
	for h := range holds {
		h.end(&endedError{err})
	}
}

// hold adds h to the live holds; if the session has ended, it ends h.
func (st *state) hold(h *Hold) {
	st.holdMu.Lock()
	if err := st.ended; err != nil {
		st.holdMu.Unlock()
		h.end(&endedError{err})
		return
	}
	if st.holds == nil {
		st.holds = make(map[*Hold]bool)
	}
	st.holds[h] = false
	st.holdMu.Unlock()
}

// drop removes h, which has ended, from the live holds.
func (st *state) drop(h *Hold) {
	st.holdMu.Lock()
	defer st.holdMu.Unlock()
	delete(st.holds, h)
}

// name reserves a key name: the lease and a slot number unique among the
// session's live attempts.
func (p *state) name() (slot uint64, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		slot = p.free[n-1]
		p.free = p.free[:n-1]
	} else {
		slot = p.next
		p.next++
	}
	if p.busy == nil {
		p.busy = make(map[uint64]struct{})
	}
	p.busy[slot] = struct{}{}
	return slot, p.lease + "-" + strconv.FormatUint(slot, 10)
}

// release frees a slot for reuse.
func (p *state) release(slot uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.busy, slot)
	p.free = append(p.free, slot)
}

// idle marks slot, whose name is retired, as used by no attempt: a key
// under it is a stray that the heartbeat's check may delete.
func (p *state) idle(slot uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.busy, slot)
}

// epoch returns the session's epoch for the queue with prefix.
func (p *state) epoch(prefix string) (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.epochs[prefix]
	return e.rev, e.dirty
}

// setEpoch records that the epoch key was seen or put at mod revision rev
// (0: the key is gone), which clears dirtiness; an older rev than the one
// recorded is ignored. It returns the revision recorded.
func (p *state) setEpoch(prefix string, rev int64) int64 {
	return p.updateEpoch(prefix, func(e *epoch) {
		if rev > e.rev || rev == 0 {
			e.rev = rev
		}
		e.dirty = false
	})
}

// markDirty records that a cleanup could not move the epoch.
func (p *state) markDirty(prefix string) {
	p.updateEpoch(prefix, func(e *epoch) { e.dirty = true })
}

func (p *state) updateEpoch(prefix string, f func(*epoch)) int64 {
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
// never handed out again, and the session's next enqueue retries the
// delete.
func (p *state) retire(key string) {
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
func (p *state) sweep(ctx context.Context, kv retry.KV) error {
	p.mu.Lock()
	keys := make([]string, 0, len(p.leftovers))
	for k := range p.leftovers {
		keys = append(keys, k)
	}
	p.mu.Unlock()
	for _, k := range keys {
		if _, err := kv.Delete(ctx, k); err != nil {
			return fmt.Errorf("removing leftover key %q: %w", k, err)
		}
		p.mu.Lock()
		delete(p.leftovers, k)
		p.mu.Unlock()
	}
	return nil
}

// Watched holds.
//
// A hold whose Done is called must learn when its key is deleted behind
// its back (by hand, or by a revoke the heartbeat has not seen yet). A
// watch per hold costs two goroutines and an etcd watcher each; a service
// holding thousands of locks would pay that thousands of times. Instead
// the session's heartbeat loop, after each acknowledged keepalive, lists
// the keys bound to the lease (one LeaseTimeToLive with keys) and ends
// every watched hold whose key is missing: no goroutine and no watch per
// hold, one request per heartbeat interval (which also finds strays,
// below), and a deletion reported within one interval. The session's own
// end still ends every hold at once (End).

// watch has h's key checked at each heartbeat, if h is live.
func (st *state) watch(h *Hold) {
	st.holdMu.Lock()
	defer st.holdMu.Unlock()
	if _, ok := st.holds[h]; ok {
		st.holds[h] = true
	}
}

// unwatch stops the check of h's key.
func (st *state) unwatch(h *Hold) {
	st.holdMu.Lock()
	defer st.holdMu.Unlock()
	if _, ok := st.holds[h]; ok {
		st.holds[h] = false
	}
}

// check runs in the heartbeat loop: it ends every watched hold whose key
// is no longer bound to the lease.
func (st *state) check(ctx context.Context) {
	st.holdMu.Lock()
	var holds []*Hold
	for h, watched := range st.holds {
		if watched {
			holds = append(holds, h)
		}
	}
	st.holdMu.Unlock()
	resp, err := retry.Do(ctx, func(ctx context.Context) (*clientv3.LeaseTimeToLiveResponse, error) {
		return st.cli.TimeToLive(ctx, st.id, clientv3.WithAttachedKeys())
	})
	if err != nil || resp.TTL == -1 {
		return // next time; a lease gone is the session's to report
	}
	present := make(map[string]struct{}, len(resp.Keys))
	for _, k := range resp.Keys {
		present[string(k)] = struct{}{}
	}
	for _, h := range holds {
		if _, ok := present[h.t.Key]; !ok {
			h.gone()
		}
	}
	_ = st.sweep(ctx, st.kv) // failures stay leftovers for the next try
	st.removeStrays(ctx, resp.Keys)
}

// Strays.
//
// An enqueue can be applied after its attempt is over: etcd's client sends
// a Txn again after a timeout while the caller's context lives, and the
// first copy can still be applied, late, by a member that was paused with
// it; the caller saw only the second copy succeed. Applied after that
// attempt's Release, the copy passes every compare (the name is free
// again, the epoch unmoved) and leaves a key of the live session that
// nobody waits on, ahead of every later waiter, until the session ends.
// The model in model/ found this. So the heartbeat's check also deletes
// the session's keys under names no attempt holds: such a key is a stray,
// whatever wrote it. A stray is removed within one heartbeat interval.

// maxStrayDeletes bounds the deletes of one check's Txn, below etcd's
// default limit of 128 operations per Txn.
const maxStrayDeletes = 100

// removeStrays deletes the keys among keys (the lease's) under names of
// this session that no attempt holds. The free names among them are taken
// out of use for good: the delete is unguarded and internal/retry may send
// it twice, so a copy of it could land after the name went to a later
// attempt and delete that attempt's entry (as a late copy of an abandon
// did; see abandonTxn). Strays are rare, and a name is only a number.
func (st *state) removeStrays(ctx context.Context, keys [][]byte) {
	var ops []clientv3.Op
	st.mu.Lock()
	for _, k := range keys {
		slot, ok := st.slotOf(string(k))
		if !ok {
			continue
		}
		if _, busy := st.busy[slot]; busy {
			continue
		}
		if len(ops) == maxStrayDeletes {
			break // the rest at the next heartbeat
		}
		if i := slices.Index(st.free, slot); i >= 0 {
			st.free = slices.Delete(st.free, i, i+1)
		}
		ops = append(ops, clientv3.OpDelete(string(k)))
	}
	st.mu.Unlock()
	if len(ops) > 0 {
		_, _ = st.kv.Txn(ctx).Then(ops...).Commit() // a failure: next time
	}
}

// slotOf parses the slot of an entry key of this session
// ("…/<lease>-<slot>"); other keys (epoch keys, keys the user bound to the
// lease) do not parse.
func (st *state) slotOf(key string) (uint64, bool) {
	stem := st.lease + "-"
	i := strings.LastIndexByte(key, '/')
	if i < 0 || !strings.HasPrefix(key[i+1:], stem) {
		return 0, false
	}
	n, err := strconv.ParseUint(key[i+1+len(stem):], 10, 64)
	if err != nil || n >= st.next {
		return 0, false
	}
	return n, true
}
