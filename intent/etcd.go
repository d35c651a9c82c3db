package intent

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/fault"
	"github.com/dlock-go/dlock/lock"
)

// Etcd is a Store on etcd. A lock's journal lives beside its queue, under
// "<prefix>/<name>!intent/" (each "/" in the name written "%2F"; names
// never contain "!", so no lock's queue ranges over it):
//
//   - "mark": the mark, a 20-digit decimal;
//   - "op/<op>" (every byte of the op outside [A-Za-z0-9-._~] written %XX):
//     the record, as JSON
//     {"op":…,"key":…,"name":…,"seq":<the first writer's Seq>,"done":…,"failure":…,"at":…};
//   - "open/<op>": the same record while it is open, so that Open reads
//     the open intents alone, however many finished ones are kept.
//
// A finished record is also listed, for compaction, under
// "<prefix>/!intent-done/<20-digit Unix nanoseconds of its outcome>/…"
// (its value the record's key), so that Compact reads only what it
// removes, across every lock.
//
// Every write is one Txn that compares the mark's mod revision (so a raise
// by a later holder in between voids it) and, when the grant is an etcd
// grant (a *lock.Grant, or any Held with IsOwner() clientv3.Cmp), that the
// grant's key still exists: a holder whose session expired is refused even
// before a later holder writes, with an error matching lock.ErrLockLost
// (and ErrSuperseded too, if the mark has moved past it). The records'
// order is their keys' create revisions. Cost: a read and a Txn per write
// (two round trips, one raft write); a record's outcome is stamped with
// the client's clock.
type Etcd struct {
	cli    *clientv3.Client
	prefix string
}

var _ Store = (*Etcd)(nil)

// NewEtcd returns a Store on etcd through cli, with its journals under
// prefix: give the locks' prefix (dlock.Client's is "dlock/lock", its
// Prefix and "/lock"), so that a journal sits beside its lock. A trailing
// "/" is ignored.
func NewEtcd(cli *clientv3.Client, prefix string) *Etcd {
	if cli == nil {
		panic("intent: NewEtcd: nil *clientv3.Client")
	}
	return &Etcd{cli: cli, prefix: strings.TrimSuffix(prefix, "/")}
}

// doneDir is the prefix of the journal-wide list of finished records.
func (s *Etcd) doneDir() string { return s.prefix + "/!intent-done/" }

// doneKey lists record key, finished at at, for compaction.
func (s *Etcd) doneKey(at time.Time, key string) string {
	return fmt.Sprintf("%s%020d/%s", s.doneDir(), at.UnixNano(), strings.TrimPrefix(key, s.prefix+"/"))
}

// dir returns the journal's key prefix for lock name.
func (s *Etcd) dir(name string) string {
	return s.prefix + "/" + strings.ReplaceAll(name, "/", "%2F") + "!intent/"
}

func escapeOp(op string) string {
	var b strings.Builder
	for i := 0; i < len(op); i++ {
		c := op[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// etcdRecord is a record's JSON form in etcd.
type etcdRecord struct {
	Op      string    `json:"op"`
	Key     string    `json:"key"`
	Name    string    `json:"name"`
	Seq     uint64    `json:"seq"`
	Done    bool      `json:"done"`
	Failure string    `json:"failure,omitempty"`
	At      time.Time `json:"at,omitzero"`
}

func (r etcdRecord) record() Record {
	return Record{
		Intent: Intent{Op: r.Op, Key: r.Key, Token: fence.Token{Name: r.Name, Seq: r.Seq}},
		Done:   r.Done, Failure: r.Failure, At: r.At,
	}
}

func encodeMark(seq uint64) string { return fmt.Sprintf("%020d", seq) }

// owned is a grant that can say, as an etcd comparison, that it holds.
type owned interface{ IsOwner() clientv3.Cmp }

// maxConflicts bounds the retries of a fenced write that lost a race with
// another write to the same journal.
const maxConflicts = 100

// fenced runs one fenced write for h's journal: it reads the mark and the
// keys in read (one Txn), lets plan decide from them, and commits plan's
// ops in a Txn that compares the mark's mod revision, plan's own
// comparisons and h's ownership, raising the mark to h's Seq with them. A
// commit that fails because the journal moved is retried from the read.
func (s *Etcd) fenced(ctx context.Context, h Grant, read []clientv3.Op,
	plan func(got []*clientv3.GetResponse) ([]clientv3.Cmp, []clientv3.Op, error),
) (*clientv3.TxnResponse, error) {
	t := h.Token()
	if err := t.Check(); err != nil {
		return nil, err
	}
	unfenced := fault.Planted(fault.UnfencedIntent)
	markKey := s.dir(t.Name) + "mark"
	var own []clientv3.Cmp
	if o, ok := h.(owned); ok && !unfenced {
		own = append(own, o.IsOwner())
	}
	for range maxConflicts {
		rr, err := s.cli.Txn(ctx).Then(append([]clientv3.Op{clientv3.OpGet(markKey)}, read...)...).Commit()
		if err != nil {
			return nil, err
		}
		var mark uint64
		var markRev int64
		if kvs := rr.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			if mark, err = strconv.ParseUint(string(kvs[0].Value), 10, 64); err != nil {
				return nil, fmt.Errorf("intent: %s: bad mark %q", markKey, kvs[0].Value)
			}
			markRev = kvs[0].ModRevision
		}
		if mark > t.Seq && !unfenced {
			return nil, Stale(t, mark)
		}
		got := make([]*clientv3.GetResponse, len(read))
		for i := range read {
			got[i] = (*clientv3.GetResponse)(rr.Responses[i+1].GetResponseRange())
		}
		cmps, ops, err := plan(got)
		if err != nil {
			return nil, err
		}
		if !unfenced {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(markKey), "=", markRev))
		} else {
			cmps = nil
		}
		if mark < t.Seq {
			ops = append(ops, clientv3.OpPut(markKey, encodeMark(t.Seq)))
		}
		var orElse []clientv3.Op
		if len(own) > 0 {
			orElse = []clientv3.Op{clientv3.OpTxn(own, nil, nil), clientv3.OpGet(markKey)}
		}
		resp, err := s.cli.Txn(ctx).If(append(cmps, own...)...).Then(ops...).Else(orElse...).Commit()
		if err != nil {
			return nil, err
		}
		if resp.Succeeded {
			return resp, nil
		}
		if len(own) > 0 && !resp.Responses[0].GetResponseTxn().Succeeded {
			lost := fmt.Errorf("%w: the grant's key %s is gone", lock.ErrLockLost, own[0].KeyBytes())
			if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
				if m, err := strconv.ParseUint(string(kvs[0].Value), 10, 64); err == nil && m > t.Seq {
					return nil, fmt.Errorf("%w (%w)", Stale(t, m), lost)
				}
			}
			return nil, lost
		}
	}
	return nil, fmt.Errorf("intent: %s: %d conflicting writes in a row", markKey, maxConflicts)
}

// Begin implements Store.
func (s *Etcd) Begin(ctx context.Context, h Grant, fresh Intent) (Record, error) {
	t := h.Token()
	key := s.dir(t.Name) + "op/" + escapeOp(fresh.Op)
	var rec Record
	_, err := s.fenced(ctx, h, []clientv3.Op{clientv3.OpGet(key)}, func(got []*clientv3.GetResponse) ([]clientv3.Cmp, []clientv3.Op, error) {
		if kvs := got[0].Kvs; len(kvs) > 0 {
			var r etcdRecord
			if err := json.Unmarshal(kvs[0].Value, &r); err != nil {
				return nil, nil, fmt.Errorf("intent: %s: %w", key, err)
			}
			rec = r.record()
			return nil, nil, nil
		}
		v, err := json.Marshal(etcdRecord{Op: fresh.Op, Key: fresh.Key, Name: t.Name, Seq: fresh.Token.Seq})
		if err != nil {
			return nil, nil, err
		}
		rec = Record{Intent: fresh}
		return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(key, string(v)), clientv3.OpPut(s.dir(t.Name)+"open/"+escapeOp(fresh.Op), string(v))}, nil
	})
	return rec, err
}

// Finish implements Store.
func (s *Etcd) Finish(ctx context.Context, h Grant, op, failure string) error {
	dir := s.dir(h.Token().Name)
	key := dir + "op/" + escapeOp(op)
	_, err := s.fenced(ctx, h, []clientv3.Op{clientv3.OpGet(key)}, func(got []*clientv3.GetResponse) ([]clientv3.Cmp, []clientv3.Op, error) {
		kvs := got[0].Kvs
		if len(kvs) == 0 {
			return nil, nil, fmt.Errorf("intent: no record of %q at %s", op, key)
		}
		var r etcdRecord
		if err := json.Unmarshal(kvs[0].Value, &r); err != nil {
			return nil, nil, fmt.Errorf("intent: %s: %w", key, err)
		}
		if r.Done {
			return nil, nil, nil
		}
		r.Done, r.Failure, r.At = true, failure, time.Now().UTC()
		v, err := json.Marshal(r)
		if err != nil {
			return nil, nil, err
		}
		return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", kvs[0].ModRevision)},
			[]clientv3.Op{
				clientv3.OpPut(key, string(v)),
				clientv3.OpDelete(dir + "open/" + escapeOp(op)),
				clientv3.OpPut(s.doneKey(r.At, key), key),
			}, nil
	})
	return err
}

// Open implements Store: the mark is raised and the open records read in
// one Txn.
func (s *Etcd) Open(ctx context.Context, h Grant) ([]Record, error) {
	dir := s.dir(h.Token().Name) + "open/"
	resp, err := s.fenced(ctx, h, nil, func([]*clientv3.GetResponse) ([]clientv3.Cmp, []clientv3.Op, error) {
		return nil, []clientv3.Op{clientv3.OpGet(dir, clientv3.WithPrefix())}, nil
	})
	if err != nil {
		return nil, err
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	slices.SortFunc(kvs, func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.CreateRevision, b.CreateRevision) })
	var out []Record
	for _, kv := range kvs {
		var r etcdRecord
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, fmt.Errorf("intent: %s: %w", kv.Key, err)
		}
		if !r.Done {
			out = append(out, r.record())
		}
	}
	return out, nil
}

// Mark implements Store.
func (s *Etcd) Mark(ctx context.Context, name string) (uint64, error) {
	resp, err := s.cli.Get(ctx, s.dir(name)+"mark")
	if err != nil || len(resp.Kvs) == 0 {
		return 0, err
	}
	return strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64)
}

// compactBatch is how many records one compaction Txn removes.
const compactBatch = 32

// Compact implements Store: it reads the list of finished records up to
// before, and removes each listed record with its entry, in Txns of
// compactBatch; a record whose mod revision is no longer its entry's (it
// was removed and written anew since) stays, and only its entry goes.
func (s *Etcd) Compact(ctx context.Context, before time.Time, limit int) (int, error) {
	end := fmt.Sprintf("%s%020d", s.doneDir(), before.UnixNano())
	resp, err := s.cli.Get(ctx, s.doneDir(), clientv3.WithRange(end), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return 0, err
	}
	n := 0
	for kvs := resp.Kvs; len(kvs) > 0; {
		batch := kvs[:min(len(kvs), compactBatch)]
		kvs = kvs[len(batch):]
		var ops []clientv3.Op
		for _, kv := range batch {
			rec := string(kv.Value)
			ops = append(ops, clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(rec), "=", kv.ModRevision)},
				[]clientv3.Op{clientv3.OpDelete(string(kv.Key)), clientv3.OpDelete(rec)},
				[]clientv3.Op{clientv3.OpDelete(string(kv.Key))}))
		}
		r, err := s.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return n, err
		}
		for _, sub := range r.Responses {
			if sub.GetResponseTxn().Succeeded {
				n++
			}
		}
	}
	return n, nil
}
