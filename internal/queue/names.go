package queue

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/internal/retry"
)

// The session's key names ("Key names" in docs/queue.md): an entry's name
// is the lease and a slot number unique among the session's live attempts,
// handed out by reserveName and freed by freeSlot once the attempt is
// over. A name whose key could not be removed is retired: never handed out
// again, its key a leftover (addLeftover) that the session's next enqueue
// deletes (sweep). A key under a name no attempt holds is a stray, which
// the heartbeat deletes (removeStrays).

// reserveName reserves a key name: the lease and a slot number unique
// among the session's live attempts.
func (st *state) reserveName() (slot uint64, keyName string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if n := len(st.freeSlots); n > 0 {
		slot = st.freeSlots[n-1]
		st.freeSlots = st.freeSlots[:n-1]
	} else {
		slot = st.next
		st.next++
	}
	if st.busy == nil {
		st.busy = make(map[uint64]struct{})
	}
	st.busy[slot] = struct{}{}
	return slot, st.lease + "-" + strconv.FormatUint(slot, 10)
}

// freeSlot frees a slot for reuse: its attempt is over and its key
// deleted.
func (st *state) freeSlot(slot uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.busy, slot)
	st.freeSlots = append(st.freeSlots, slot)
}

// idle marks slot, whose name is retired, as used by no attempt: a key
// under it is a stray that the heartbeat's check may delete.
func (st *state) idle(slot uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.busy, slot)
}

// retire retires t's name (idle) and records its key and side keys as
// leftovers (addLeftover).
func (q *Queue) retire(t ticket) {
	t.st.idle(t.slot)
	t.st.addLeftover(t.Key)
	for _, k := range q.rule.sideKeys(q, t.Key) {
		t.st.addLeftover(k)
	}
}

// addLeftover records key, whose removal failed, as a leftover: its name
// is never handed out again, and the session's next enqueue retries the
// delete.
func (st *state) addLeftover(key string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.leftovers == nil {
		st.leftovers = make(map[string]bool)
	}
	st.leftovers[key] = true
}

// sweep deletes the session's leftover keys, so that a failed cleanup does
// not leave the session queued behind its own key until the lease ends.
// Failures are kept for the next sweep.
func (st *state) sweep(ctx context.Context, kv retry.KV) error {
	st.mu.Lock()
	keys := make([]string, 0, len(st.leftovers))
	for k := range st.leftovers {
		keys = append(keys, k)
	}
	st.mu.Unlock()
	for _, k := range keys {
		if _, err := kv.Delete(ctx, k); err != nil {
			return fmt.Errorf("removing leftover key %q: %w", k, err)
		}
		st.mu.Lock()
		delete(st.leftovers, k)
		st.mu.Unlock()
	}
	return nil
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
		if i := slices.Index(st.freeSlots, slot); i >= 0 {
			st.freeSlots = slices.Delete(st.freeSlots, i, i+1)
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
