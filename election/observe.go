package election

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	// readTimeout bounds one read of the election's keys by Observe.
	readTimeout = 5 * time.Second
	// minRetry and maxRetry bound the backoff between failed reads.
	minRetry = 50 * time.Millisecond
	maxRetry = 2 * time.Second
)

// observer follows one election: it keeps every candidate key (the queue is
// short) from a read plus the watch events after it, and derives the leader
// as the key with the lowest create revision.
type observer struct {
	cli    *clientv3.Client
	prefix string
	hook   func(rev int64) // test-only, see options.readHook
}

// run delivers the election's states on out until ctx ends, then closes
// out.
func (ob observer) run(ctx context.Context, out chan<- Leader) {
	defer close(out)
	d := latest{out: out}
	for {
		keys, rev, ok := ob.read(ctx, &d)
		if !ok {
			return
		}
		d.set(leaderOf(keys))
		if ob.hook != nil {
			ob.hook(rev)
		}
		if !ob.follow(ctx, keys, rev, &d) {
			return
		}
	}
}

// read returns every key of the election and the read's revision, retrying
// with backoff (and delivering meanwhile) until it succeeds or ctx ends.
func (ob observer) read(ctx context.Context, d *latest) (map[string]*mvccpb.KeyValue, int64, bool) {
	backoff := minRetry
	for {
		rctx, cancel := context.WithTimeout(ctx, readTimeout)
		resp, err := ob.cli.Get(rctx, ob.prefix, clientv3.WithPrefix())
		cancel()
		if err == nil {
			keys := make(map[string]*mvccpb.KeyValue, len(resp.Kvs))
			for _, kv := range resp.Kvs {
				keys[string(kv.Key)] = kv
			}
			return keys, resp.Header.Revision, true
		}
		retry := time.NewTimer(backoff)
		backoff = min(2*backoff, maxRetry)
	wait:
		for {
			select {
			case <-ctx.Done():
				retry.Stop()
				return nil, 0, false
			case d.ch() <- d.cur:
				d.delivered()
			case <-retry.C:
				break wait
			}
		}
	}
}

// follow applies watch events from rev+1 on to keys, delivering states,
// until the watch breaks (it returns true: read again) or ctx ends (false).
func (ob observer) follow(ctx context.Context, keys map[string]*mvccpb.KeyValue, rev int64, d *latest) bool {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := ob.cli.Watch(wctx, ob.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		select {
		case <-ctx.Done():
			return false
		case d.ch() <- d.cur:
			d.delivered()
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil { // compacted, cancelled, no leader, closed
				return ctx.Err() == nil
			}
			for _, ev := range wr.Events {
				switch ev.Type {
				case clientv3.EventTypePut:
					keys[string(ev.Kv.Key)] = ev.Kv
				case clientv3.EventTypeDelete:
					delete(keys, string(ev.Kv.Key))
				}
			}
			d.set(leaderOf(keys))
		}
	}
}

// leaderOf returns the leader among keys: the lowest create revision.
func leaderOf(keys map[string]*mvccpb.KeyValue) Leader {
	var first *mvccpb.KeyValue
	for _, kv := range keys {
		if first == nil || kv.CreateRevision < first.CreateRevision {
			first = kv
		}
	}
	if first == nil {
		return Leader{}
	}
	return Leader{Value: string(first.Value), Epoch: uint64(first.CreateRevision)}
}

// latest is a one-slot "latest state" delivery: set replaces the pending
// state, and ch is out only while there is a state the reader has not been
// given yet.
type latest struct {
	out      chan<- Leader
	cur      Leader // the latest state
	have     bool   // cur is set
	sent     Leader // the last delivered state
	anySent  bool   // sent is set
	maxEpoch uint64
}

// set records x as the latest state, unless it is a leader older than one
// already seen.
func (l *latest) set(x Leader) {
	if x.Epoch != 0 && x.Epoch < l.maxEpoch {
		return
	}
	l.maxEpoch = max(l.maxEpoch, x.Epoch)
	l.cur, l.have = x, true
}

// ch returns out if cur is pending, else nil (a nil channel never sends).
func (l *latest) ch() chan<- Leader {
	if l.have && (!l.anySent || l.cur != l.sent) {
		return l.out
	}
	return nil
}

func (l *latest) delivered() { l.sent, l.anySent = l.cur, true }
