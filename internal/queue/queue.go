// Package queue is the ordered-keys machinery shared by lock and election:
// entries are keys under one prefix, bound to a session lease, ordered by
// create revision. The first entry is the holder; every other entry waits for
// its immediate predecessor to be deleted (one release wakes one waiter).
package queue

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// CleanupTimeout bounds the detached delete that removes an entry after a
// cancelled or failed acquire.
const CleanupTimeout = 5 * time.Second

// PrefixFor returns the queue prefix of the lock or election name under
// root: root + "/" + name + "/", with every "/" in name written "%2F". Names
// may contain "/" ("billing/invoice-7") and never "%", so no queue's prefix
// is a prefix of another's: unescaped, the queue of "a" would range over
// the keys of "a/b" too.
func PrefixFor(root, name string) string {
	return root + "/" + strings.ReplaceAll(name, "/", "%2F") + "/"
}

// Queue is a prefix of ordered keys. Prefix ends with "/".
type Queue struct {
	Client *clientv3.Client
	Prefix string
}

// Entry is one key in the queue.
type Entry struct {
	Key string
	Rev int64 // create revision: the fencing token
}

// ErrEntryGone is returned by Wait when the entry's own key disappeared
// while it waited (its session ended or someone deleted it).
var ErrEntryGone = errors.New("queue entry deleted while waiting")

// Wait blocks until e is the first entry. pred is e's predecessor as
// returned by Join, and fromRev the revision to watch it from: e.Rev+1
// (pred existed at e.Rev, so its deletion comes later). Watching from a
// revision above the store's current one puts the watcher straight into
// etcd's synced group; a watch from an older revision is caught up by a
// loop that runs every 100ms, which would delay a quick handoff by up to
// that much. It watches only the immediate predecessor; after each
// deletion it re-reads, in one round trip, the new predecessor and whether e
// itself still exists (see check). It returns ErrEntryGone if e
// disappeared, or ctx's error (bind ctx to the session with BindSession, so
// that every read and watch stops when the session ends). It never deletes
// e.
func (q Queue) Wait(ctx context.Context, e Entry, pred *mvccpb.KeyValue, fromRev int64) error {
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

// check reads, in one round trip (one range, no Txn), e's predecessor
// (nil if e is first) and whether e still exists; it returns the revision
// it read at. The range is the queue's last two entries created at or
// before e.Rev: e itself, then its predecessor.
//
// After a watch event (delRev > 0) the read is serializable: it skips the
// leader round trip of a linearizable read, which is the larger part of a
// handoff after the event. That is safe once the read's revision r is at
// least delRev (≥ e.Rev): entries created before e never reappear (every
// new key gets a later revision), so an earlier entry that exists now
// existed at r too, and "no predecessor at r" means none now; and e's own
// key, if present at r, may be deleted just after the read either way,
// which the hold's watch and the session's deadline report. A read below
// delRev (from another member than the one that sent the event, or a
// moment before the store's revision moves: etcd sends watch events just
// before) is repeated linearizably, as is the read when the watch broke
// without an event (delRev = 0).
func (q Queue) check(ctx context.Context, e Entry, delRev int64) (pred *mvccpb.KeyValue, rev int64, err error) {
	var resp *clientv3.GetResponse
	for _, serializable := range []bool{delRev > 0, false} {
		opts := []clientv3.OpOption{
			clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
			clientv3.WithLimit(2), clientv3.WithMaxCreateRev(e.Rev), clientv3.WithKeysOnly(),
		}
		if serializable {
			opts = append(opts, clientv3.WithSerializable())
		}
		if resp, err = q.Client.Get(ctx, q.Prefix, opts...); err != nil {
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
func (q Queue) waitDelete(ctx context.Context, key string, fromRev int64) (int64, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := q.Client.Watch(wctx, key, clientv3.WithRev(fromRev), clientv3.WithFilterPut())
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

// Remove deletes e if it is still the same key (same create revision): a
// guarded delete that never removes a later entry. It reports whether a key
// was deleted.
func (q Queue) Remove(ctx context.Context, e Entry) (bool, error) {
	resp, err := q.Client.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(e.Key), "=", e.Rev),
	).Then(clientv3.OpDelete(e.Key)).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// Owned returns a Cmp that holds only while e's key exists with e's create
// revision, for writes inside etcd conditional on e.
func (e Entry) Owned() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(e.Key), "=", e.Rev)
}

// WatchGone blocks until e's key is deleted or ctx ends; it reports true if
// the key is gone. It starts watching at fromRev and re-reads the key
// whenever the watch breaks (compaction, reconnect).
func (q Queue) WatchGone(ctx context.Context, e Entry, fromRev int64) bool {
	for {
		wctx, cancel := context.WithCancel(ctx)
		wch := q.Client.Watch(wctx, e.Key, clientv3.WithRev(fromRev), clientv3.WithFilterPut())
		gone, broken := q.watchGoneOnce(ctx, wch)
		cancel()
		if !broken {
			return gone
		}
		// The watch broke: read the key directly before watching again.
		resp, err := q.Client.Get(ctx, e.Key, clientv3.WithKeysOnly())
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

func (q Queue) watchGoneOnce(ctx context.Context, wch clientv3.WatchChan) (gone, broken bool) {
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
