package queue

import (
	"context"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// kvReader is where readAfter sends a read: the client itself, or q.kv.
type kvReader interface {
	Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error)
	Txn(ctx context.Context) clientv3.Txn
}

// readAfter is the one way a waiter re-reads the queue after a deletion at
// revision delRev (0: no watch event told it: the watch broke, or a read
// found the key gone). read sends its request through via, with more
// added to the options of each of its reads, and returns the revision the
// read was served at. After an event the read is serializable
// (WithSerializable, through the client): the member serves it itself,
// leader or not, and it is sent once (it follows each watch event: the hot
// path of a handoff). If it was served below delRev (a lagging member),
// or without an event, the read is linearizable (no option, through q.kv):
// it needs the leader, and rides out an election (internal/retry). See
// "Waiting" in docs/queue.md. It returns read's error.
func (q *Queue) readAfter(delRev int64, read func(via kvReader, more ...clientv3.OpOption) (int64, error)) error {
	if delRev > 0 {
		rev, err := read(q.cli, clientv3.WithSerializable())
		if err != nil || rev >= delRev {
			return err
		}
	}
	_, err := read(q.kv)
	return err
}

// waitFirst blocks until e is the first entry. pred is e's predecessor at
// its enqueue, and fromRev the revision to watch it from: e.Rev+1 (see
// "Waiting" in docs/queue.md). It watches only the immediate predecessor;
// after each deletion it re-reads, in one request, the new predecessor and
// whether e itself still exists (readPredecessor). It returns ErrEntryGone
// if e disappeared, or ctx's error. It never deletes e.
func (q *Queue) waitFirst(ctx context.Context, e entry, pred *mvccpb.KeyValue, fromRev int64) error {
	for pred != nil {
		delRev, err := q.waitDelete(ctx, pred, fromRev)
		if err != nil {
			return err
		}
		var rev int64
		if pred, rev, err = q.readPredecessor(ctx, e, delRev); err != nil {
			return err
		}
		fromRev = rev + 1
	}
	return nil
}

// readPredecessor reads, in one range, e's predecessor (nil if e is
// first) and whether e still exists; it returns the revision it read at.
// The range is the queue's last two entries created at or before e.Rev: e
// itself, then its predecessor. delRev is as readAfter's.
func (q *Queue) readPredecessor(ctx context.Context, e entry, delRev int64) (pred *mvccpb.KeyValue, rev int64, err error) {
	opts := []clientv3.OpOption{
		clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
		clientv3.WithLimit(2), clientv3.WithMaxCreateRev(e.Rev), clientv3.WithKeysOnly(),
	}
	var resp *clientv3.GetResponse
	if err = q.readAfter(delRev, func(via kvReader, more ...clientv3.OpOption) (int64, error) {
		if resp, err = via.Get(ctx, q.prefix, append(opts, more...)...); err != nil {
			return 0, err
		}
		return resp.Header.Revision, nil
	}); err != nil {
		return nil, 0, err
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != e.Rev || string(resp.Kvs[0].Key) != e.Key {
		return nil, 0, ErrEntryGone
	}
	if len(resp.Kvs) > 1 {
		pred = resp.Kvs[1]
	}
	return pred, resp.Header.Revision, nil
}

// waitDelete returns when pred's key is deleted at or after revision
// fromRev, with the deletion's revision (0 when it was learned by a read),
// or with revision 0 when the watch ends for another reason (compaction, a
// broken stream): the caller re-reads the queue either way.
func (q *Queue) waitDelete(ctx context.Context, pred *mvccpb.KeyValue, fromRev int64) (int64, error) {
	key := string(pred.Key)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// A watch from now is synced at once (a watch from a past revision
	// lands in etcd's unsynced group, caught up every 100ms: see "Waiting"
	// in docs/queue.md). If other writes came since fromRev (the created notice
	// says), the deletion may be among them: one read tells.
	now := q.cli.Watch(wctx, key, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case wr, ok = <-now:
		}
		if !ok || wr.Err() != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			return 0, nil // re-read the queue
		}
		if wr.Created && wr.Header.Revision >= fromRev {
			deleted, err := q.predDeleted(ctx, pred)
			if err != nil || deleted {
				return 0, err
			}
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return ev.Kv.ModRevision, nil
			}
		}
	}
}

// predDeleted reports whether kv's key (the predecessor's) is deleted (or
// is another key of the same name) now: a linearizable read, so that a
// deletion before a watch's start revision is never missed.
func (q *Queue) predDeleted(ctx context.Context, kv *mvccpb.KeyValue) (bool, error) {
	resp, err := q.kv.Get(ctx, string(kv.Key), clientv3.WithKeysOnly())
	if err != nil {
		return false, err
	}
	return len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != kv.CreateRevision, nil
}

// waitReader blocks until no writer precedes e (a reader). writer is the
// last writer before e at its enqueue. Like waitFirst, it watches only that
// writer; after its deletion it re-reads, in one Txn of two reads at one
// revision, whether e still exists and the last writer created before it
// (readLastWriter).
func (q *Queue) waitReader(ctx context.Context, e entry, writer *mvccpb.KeyValue, fromRev int64) error {
	for writer != nil {
		delRev, err := q.waitDelete(ctx, writer, fromRev)
		if err != nil {
			return err
		}
		var rev int64
		if writer, rev, err = q.readLastWriter(ctx, e, delRev); err != nil {
			return err
		}
		fromRev = rev + 1
	}
	return nil
}

// readLastWriter is readPredecessor for a reader: in one Txn of two reads
// at one revision, its own key, and the last writer created before it.
func (q *Queue) readLastWriter(ctx context.Context, e entry, delRev int64) (writer *mvccpb.KeyValue, rev int64, err error) {
	var resp *clientv3.TxnResponse
	if err = q.readAfter(delRev, func(via kvReader, more ...clientv3.OpOption) (int64, error) {
		if resp, err = via.Txn(ctx).Then(
			clientv3.OpGet(e.Key, append([]clientv3.OpOption{clientv3.WithKeysOnly()}, more...)...),
			clientv3.OpGet(q.prefix, lastWriter(q, append(more, clientv3.WithMaxCreateRev(e.Rev))...)...),
		).Commit(); err != nil {
			return 0, err
		}
		return resp.Header.Revision, nil
	}); err != nil {
		return nil, 0, err
	}
	own := resp.Responses[0].GetResponseRange().Kvs
	if len(own) == 0 || own[0].CreateRevision != e.Rev {
		return nil, 0, ErrEntryGone
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		writer = kvs[0]
	}
	return writer, resp.Header.Revision, nil
}

// waitOrphans runs once e is first in a queue with lock-delay d: if a
// shadow older than e exists (an orphan: an earlier entry ended without a
// release, see ExclusiveDelay), it waits d from now, then deletes the
// orphans, in a Txn that also checks that e still exists. Without orphans
// it costs one read.
func (q *Queue) waitOrphans(ctx context.Context, e entry, d time.Duration) error {
	own := shadowPrefix(q) + strings.TrimPrefix(e.Key, q.prefix)
	resp, err := q.kv.Get(ctx, shadowPrefix(q), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(e.Rev-1))
	if err != nil {
		return err
	}
	var dels []clientv3.Op
	for _, kv := range resp.Kvs {
		if string(kv.Key) != own {
			dels = append(dels, clientv3.OpDelete(string(kv.Key)))
		}
	}
	if len(dels) == 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
	}
	// The orphans' names are of ended leases, which etcd never grants
	// again: deleting them by name deletes nothing of a live entry.
	tr, err := q.kv.Txn(ctx).If(e.Owned()).Then(dels...).Commit()
	if err != nil {
		return err
	}
	if !tr.Succeeded {
		return ErrEntryGone
	}
	return nil
}

// waitShared blocks until fewer than n entries precede e (a semaphore
// with n permits); before is their number at e's enqueue. It keeps that
// count from one watch on the queue's prefix (deletions, with the deleted
// key's create revision): a deletion of an earlier entry lowers it, so a
// release makes only the waiter it grants read anything. That read
// (readHolders) confirms the grant; after a broken watch (or a read that
// disagrees with the count) the count is read again.
func (q *Queue) waitShared(ctx context.Context, e entry, n, before int64) error {
	const unknown = -1
	if before < n {
		return nil // the enqueue's own count: exact, at e's revision
	}
	fromRev, delRev := e.Rev+1, int64(0)
	for {
		if before == unknown {
			var rev int64
			var err error
			if before, rev, err = q.countBefore(ctx, e); err != nil {
				return err
			}
			fromRev, delRev = rev+1, 0
		}
		if before < n {
			granted, err := q.readHolders(ctx, e, n, delRev)
			if err != nil || granted {
				return err
			}
			before = unknown
			continue
		}
		var err error
		if before, delRev, fromRev, err = q.watchCount(ctx, e, n, before, fromRev); err != nil {
			return err
		}
	}
}

// watchCount follows the deletions under the prefix from fromRev, lowering
// before for each entry older than e, until before < n (it returns the
// last deletion's revision as delRev, 0 if the count came from a read, and
// the revision to resume from) or the watch breaks (before -1: the count
// must be read again).
func (q *Queue) watchCount(ctx context.Context, e entry, n, before, fromRev int64) (int64, int64, int64, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// A watch from now (synced at once, see waitDelete). If writes came
	// since fromRev (the created notice says), the count is read again, at
	// a revision r at or after the watch's start; the watch's deletions up
	// to r are in that count already.
	w := q.cli.Watch(wctx, q.prefix, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
	var counted int64 // deletions at or below this revision are in before
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case <-ctx.Done():
			return 0, 0, 0, ctx.Err()
		case wr, ok = <-w:
		}
		if !ok || wr.Err() != nil {
			if ctx.Err() != nil {
				return 0, 0, 0, ctx.Err()
			}
			return -1, 0, 0, nil
		}
		if wr.Created && wr.Header.Revision >= fromRev {
			var err error
			if before, counted, err = q.countBefore(ctx, e); err != nil {
				return 0, 0, 0, err
			}
			if before < n {
				return before, 0, counted + 1, nil
			}
		}
		var last int64
		for _, ev := range wr.Events {
			if ev.Type != clientv3.EventTypeDelete || ev.Kv.ModRevision <= counted {
				continue
			}
			prev := ev.PrevKv
			switch {
			case prev == nil: // no previous value: the count is unknown
				return -1, 0, 0, nil
			case prev.CreateRevision == e.Rev && string(ev.Kv.Key) == e.Key:
				return 0, 0, 0, ErrEntryGone
			case prev.CreateRevision < e.Rev:
				before--
			}
			last = ev.Kv.ModRevision
		}
		if before < n {
			return before, last, last + 1, nil
		}
	}
}

// readHolders reads the first n entries created at or before e: e is
// granted if it is among them, gone if they are fewer than n without it.
// delRev is as readAfter's.
func (q *Queue) readHolders(ctx context.Context, e entry, n, delRev int64) (bool, error) {
	opts := []clientv3.OpOption{
		clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(e.Rev),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(n),
	}
	var resp *clientv3.GetResponse
	if err := q.readAfter(delRev, func(via kvReader, more ...clientv3.OpOption) (int64, error) {
		var err error
		if resp, err = via.Get(ctx, q.prefix, append(opts, more...)...); err != nil {
			return 0, err
		}
		return resp.Header.Revision, nil
	}); err != nil {
		return false, err
	}
	for _, kv := range resp.Kvs {
		if kv.CreateRevision == e.Rev && string(kv.Key) == e.Key {
			return true, nil
		}
	}
	if int64(len(resp.Kvs)) < n {
		return false, ErrEntryGone
	}
	return false, nil
}

// countBefore counts, linearizably, the entries created before e, and
// checks that e still exists; it returns the read's revision.
func (q *Queue) countBefore(ctx context.Context, e entry) (int64, int64, error) {
	resp, err := q.kv.Get(ctx, q.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(e.Rev))
	if err != nil {
		return 0, 0, err
	}
	found := false
	for _, kv := range resp.Kvs {
		if kv.CreateRevision == e.Rev && string(kv.Key) == e.Key {
			found = true
		}
	}
	if !found {
		return 0, 0, ErrEntryGone
	}
	return int64(len(resp.Kvs)) - 1, resp.Header.Revision, nil
}
