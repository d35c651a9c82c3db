package queue

import (
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The session's epochs ("Late writes" in docs/queue.md): in each queue,
// the mod revision of the session's epoch key, which every enqueue
// compares and the cleanup after an unknown outcome moves, so that an
// enqueue applied after its cleanup is void.

// epochState is the session's epoch for one queue: the mod revision its
// enqueues compare the epoch key with (0: no key), and whether a cleanup
// failed to move it.
type epochState struct {
	rev   int64
	dirty bool
}

// epochKey is the session's epoch key for q: beside the queue's prefix,
// never inside any queue's (names never contain "%").
func (q *Queue) epochKey(st *state) string {
	return strings.TrimSuffix(q.prefix, "/") + "%epoch/" + st.lease
}

// epochOf returns the session's epoch for the queue with prefix.
func (st *state) epochOf(prefix string) (int64, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	e := st.epochs[prefix]
	return e.rev, e.dirty
}

// setEpoch records that the epoch key was seen or put at mod revision rev
// (0: the key is gone), which clears dirtiness; an older rev than the one
// recorded is ignored. It returns the revision recorded.
func (st *state) setEpoch(prefix string, rev int64) int64 {
	return st.updateEpoch(prefix, func(e *epochState) {
		if rev > e.rev || rev == 0 {
			e.rev = rev
		}
		e.dirty = false
	})
}

// markDirty records that a cleanup could not move the epoch.
func (st *state) markDirty(prefix string) {
	st.updateEpoch(prefix, func(e *epochState) { e.dirty = true })
}

func (st *state) updateEpoch(prefix string, f func(*epochState)) int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.epochs == nil {
		st.epochs = make(map[string]epochState)
	}
	e := st.epochs[prefix]
	f(&e)
	st.epochs[prefix] = e
	return e.rev
}

// adoptEpoch records the epoch key as read (kvs), if it moved from epoch;
// it reports whether it had.
func (q *Queue) adoptEpoch(st *state, epoch int64, kvs []*mvccpb.KeyValue) bool {
	rev := int64(0)
	if len(kvs) > 0 {
		rev = kvs[0].ModRevision
	}
	if rev == epoch {
		return false
	}
	st.setEpoch(q.prefix, rev)
	return true
}
