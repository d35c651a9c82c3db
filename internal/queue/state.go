package queue

import (
	"context"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/internal/attach"
	"github.com/dlock-go/dlock/internal/retry"
)

// state is one session's queue state, shared by all its queues: the key
// names in use (names.go, "Key names" in docs/queue.md), the leftovers of
// failed cleanups, its epoch in each queue (epochs.go, "Late writes"), and
// its live holds (ended here; added, watched and dropped by hold.go). It is
// the session's attachment: the session runs its Heartbeat (the check of
// the held keys, and the sweeps) after each acknowledged keepalive, and
// its End when it ends, which ends every hold.
// It lives and dies with the Session value: two sessions never share it,
// even with the same lease ID on two clusters.
type state struct {
	lease string // the lease in hex: every key name's stem
	id    clientv3.LeaseID
	cli   *clientv3.Client
	kv    retry.KV

	mu        sync.Mutex
	freeSlots []uint64
	next      uint64
	busy      map[uint64]struct{}   // slots handed out to an attempt and not yet freed or retired
	leftovers map[string]bool       // keys whose removal failed; their names are retired
	epochs    map[string]epochState // queue prefix → the session's epoch there

	holdMu   sync.Mutex
	holds    map[*Hold]bool // live holds → whether to check its key at each heartbeat (its Done was called)
	endCause error          // why the session ended, once End ran

	ctx    context.Context // cancelled, with the session's cause, when it ends
	cancel context.CancelCauseFunc
}

type stateKey struct{}

// stateOf returns s's state, attaching it on first use.
func stateOf(s Session) *state {
	return attach.To(s, stateKey{}, func() attach.Attachment {
		ctx, cancel := context.WithCancelCause(context.Background())
		return &state{
			lease: fmt.Sprintf("%016x", int64(s.Lease())), id: s.Lease(), cli: s.Client(), kv: retry.NewKV(s.Client()),
			ctx: ctx, cancel: cancel,
		}
	}).(*state)
}

// A hold ends when its session ends or its key is deleted, and both are
// noticed here: End, which the session calls when it ends, ends every
// live hold; checkHolds, at each heartbeat, ends every watched hold whose
// key is gone.

// Heartbeat is the session's call after each acknowledged keepalive: the
// check of the watched holds' keys (checkHolds), then, with the keys it
// listed, the sweeps of leftovers and strays.
func (st *state) Heartbeat(ctx context.Context) {
	keys, ok := st.checkHolds(ctx)
	if !ok {
		return // next time; a lease gone is the session's to report
	}
	_ = st.sweep(ctx, st.kv) // failures stay leftovers for the next try
	st.removeStrays(ctx, keys)
}

// End is the session's call when it ends: every live hold ends, with the
// session's cause, and the state's context is cancelled.
func (st *state) End(err error) {
	defer st.cancel(err)
	st.holdMu.Lock()
	st.endCause = err
	holds := st.holds
	st.holds = nil
	st.holdMu.Unlock()
	for h := range holds {
		h.end(&endedError{err})
	}
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
// hold, one request per heartbeat interval (which also finds strays, see
// names.go), and a deletion reported within one interval. The session's
// own end still ends every hold at once (End). A hold joins the live holds
// when it starts (addHold), is watched from its first Done (watch), and
// leaves them when it ends (dropHold), all in hold.go.

// checkHolds ends every watched hold whose key is no longer bound to the
// lease, and returns the keys that are (one LeaseTimeToLive with keys); ok
// is false if the request failed or the lease is gone.
func (st *state) checkHolds(ctx context.Context) (keys [][]byte, ok bool) {
	st.holdMu.Lock()
	var holds []*Hold
	for h, watched := range st.holds {
		if watched {
			holds = append(holds, h)
		}
	}
	st.holdMu.Unlock()
	resp, err := retry.TimeToLive(ctx, st.cli, st.id, clientv3.WithAttachedKeys())
	if err != nil || resp.TTL == -1 {
		return nil, false
	}
	present := make(map[string]struct{}, len(resp.Keys))
	for _, k := range resp.Keys {
		present[string(k)] = struct{}{}
	}
	for _, h := range holds {
		if _, ok := present[h.t.Key]; !ok {
			h.keyMissing()
		}
	}
	return resp.Keys, true
}
