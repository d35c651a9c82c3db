package queue

import (
	"context"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Rule says when an entry of a queue is granted: what its enqueue reads,
// what it waits on (the predicate of a waiter), and what a try acquire
// compares. Only this package implements it.
type Rule interface {
	// keyPrefix is where the rule's entries' keys go.
	keyPrefix(q *Queue) string
	// joinReads are the reads of the enqueue Txn, before its put.
	joinReads(q *Queue) []clientv3.Op
	// free returns the compare that holds when an entry put now would be
	// granted at once, if the rule has one.
	free(q *Queue) (clientv3.Cmp, bool)
	// grantedAtJoin reports whether reads (the enqueue's joinReads) say
	// that e was granted at once.
	grantedAtJoin(e entry, reads []*pb.ResponseOp) bool
	// wait blocks until e, enqueued with reads, is granted.
	wait(ctx context.Context, q *Queue, e entry, reads []*pb.ResponseOp) error
}

// Exclusive grants an entry when no entry precedes it: a mutex, an
// election, a writer. A waiter watches its immediate predecessor only.
var Exclusive Rule = exclusive{}

type exclusive struct{}

func (exclusive) keyPrefix(q *Queue) string { return q.prefix }

func (exclusive) joinReads(q *Queue) []clientv3.Op {
	return []clientv3.Op{clientv3.OpGet(q.prefix, clientv3.WithLastCreate()...)}
}

func (exclusive) free(q *Queue) (clientv3.Cmp, bool) {
	return clientv3.Compare(clientv3.CreateRevision(q.prefix), "=", 0).WithPrefix(), true
}

func (exclusive) grantedAtJoin(_ entry, reads []*pb.ResponseOp) bool {
	return predecessor(reads) == nil
}

func (exclusive) wait(ctx context.Context, q *Queue, e entry, reads []*pb.ResponseOp) error {
	return q.waitFirst(ctx, e, predecessor(reads), e.Rev+1)
}

// predecessor returns the entry a one-range read found, or nil.
func predecessor(reads []*pb.ResponseOp) *mvccpb.KeyValue {
	if kvs := reads[0].GetResponseRange().Kvs; len(kvs) > 0 {
		return kvs[0]
	}
	return nil
}

// waitFirst blocks until e is the first entry. pred is e's predecessor at
// its enqueue, and fromRev the revision to watch it from: e.Rev+1 (see
// "Waiting" in doc.go). It watches only the immediate predecessor; after
// each deletion it re-reads, in one request, the new predecessor and
// whether e itself still exists (check). It returns ErrEntryGone if e
// disappeared, or ctx's error. It never deletes e.
func (q *Queue) waitFirst(ctx context.Context, e entry, pred *mvccpb.KeyValue, fromRev int64) error {
	for pred != nil {
		delRev, err := q.waitDelete(ctx, string(pred.Key), fromRev)
		if err != nil {
			return err
		}
		var rev int64
		if pred, rev, err = q.check(ctx, e, delRev); err != nil {
			return err
		}
		fromRev = rev + 1
	}
	return nil
}

// check reads, in one range, e's predecessor (nil if e is first) and
// whether e still exists; it returns the revision it read at. The range
// is the queue's last two entries created at or before e.Rev: e itself,
// then its predecessor. After a watch event (delRev > 0) the read is
// serializable, and repeated linearizably if it was served below delRev
// (see "Waiting").
func (q *Queue) check(ctx context.Context, e entry, delRev int64) (pred *mvccpb.KeyValue, rev int64, err error) {
	var resp *clientv3.GetResponse
	for _, serializable := range []bool{delRev > 0, false} {
		opts := []clientv3.OpOption{
			clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
			clientv3.WithLimit(2), clientv3.WithMaxCreateRev(e.Rev), clientv3.WithKeysOnly(),
		}
		if serializable {
			opts = append(opts, clientv3.WithSerializable())
		}
		if resp, err = q.cli.Get(ctx, q.prefix, opts...); err != nil {
			return nil, 0, err
		}
		if !serializable || resp.Header.Revision >= delRev {
			break
		}
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != e.Rev || string(resp.Kvs[0].Key) != e.Key {
		return nil, 0, ErrEntryGone
	}
	if len(resp.Kvs) > 1 {
		pred = resp.Kvs[1]
	}
	return pred, resp.Header.Revision, nil
}

// waitDelete returns when key is deleted at or after revision fromRev, with
// the deletion's revision, or with revision 0 when the watch ends for
// another reason (compaction, a broken stream): the caller re-reads the
// queue either way.
func (q *Queue) waitDelete(ctx context.Context, key string, fromRev int64) (int64, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := q.cli.Watch(wctx, key, clientv3.WithRev(fromRev), clientv3.WithFilterPut())
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				if ctx.Err() != nil {
					return 0, ctx.Err()
				}
				return 0, nil // re-read the queue
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return ev.Kv.ModRevision, nil
				}
			}
		}
	}
}

// watchGone blocks until e's key is deleted or ctx ends; it reports true
// if the key is gone. It starts watching at fromRev and re-reads the key
// whenever the watch breaks (compaction, reconnect).
func (q *Queue) watchGone(ctx context.Context, e entry, fromRev int64) bool {
	for {
		wctx, cancel := context.WithCancel(ctx)
		wch := q.cli.Watch(wctx, e.Key, clientv3.WithRev(fromRev), clientv3.WithFilterPut())
		gone, broken := watchGoneOnce(ctx, wch)
		cancel()
		if !broken {
			return gone
		}
		// The watch broke: read the key directly before watching again.
		resp, err := q.cli.Get(ctx, e.Key, clientv3.WithKeysOnly())
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			select {
			case <-ctx.Done():
				return false
			case <-time.After(100 * time.Millisecond): // etcd unreachable: retry the read
			}
			continue
		}
		if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != e.Rev {
			return true
		}
		fromRev = resp.Header.Revision + 1
	}
}

func watchGoneOnce(ctx context.Context, wch clientv3.WatchChan) (gone, broken bool) {
	for {
		select {
		case <-ctx.Done():
			return false, false
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				return false, true
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return true, false
				}
			}
		}
	}
}
