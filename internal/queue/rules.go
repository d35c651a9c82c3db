package queue

import (
	"context"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Rule says when an entry of a queue is granted: where its key goes, what
// its enqueue reads, what it waits on (the predicate of a waiter), and
// what a try acquire compares. Only this package implements it.
type Rule interface {
	// keyPrefix is where the rule's entries' keys go.
	keyPrefix(q *Queue) string
	// value is what an entry holding val stores.
	value(val string) string
	// joinReads are the reads of the enqueue Txn, before its put.
	joinReads(q *Queue) []clientv3.Op
	// sideKeys are keys without a lease that are put with the entry whose
	// key is key, in the enqueue Txn, and deleted with it by a release or
	// an abandon (not by the lease's end).
	sideKeys(q *Queue, key string) []string
	// vacant returns the compare that holds when an entry put now would be
	// granted at once (the queue is vacant for it), if the rule has one.
	vacant(q *Queue) (clientv3.Cmp, bool)
	// admit checks the enqueue's reads before anything else: an error
	// (ErrPermits) abandons the entry.
	admit(reads []*pb.ResponseOp) error
	// queuedAtJoin reports whether the enqueue's reads say that its entry
	// has to wait, and how many entries preceded it where the reads count
	// them (a semaphore's), else -1.
	queuedAtJoin(reads []*pb.ResponseOp) (queued bool, ahead int64)
	// wait blocks until e, enqueued with reads, is granted.
	wait(ctx context.Context, q *Queue, e entry, reads []*pb.ResponseOp) error
}

// base holds the defaults of a Rule's optional parts.
type base struct{}

func (base) value(val string) string            { return val }
func (base) sideKeys(*Queue, string) []string   { return nil }
func (base) admit([]*pb.ResponseOp) error       { return nil }
func (base) vacant(*Queue) (clientv3.Cmp, bool) { return clientv3.Cmp{}, false }
func (base) keyPrefix(q *Queue) string          { return q.prefix }
func (base) joinReads(q *Queue) []clientv3.Op   { return nil }

// Exclusive grants an entry when no entry of any kind precedes it: a
// mutex, an election, an RW writer. A waiter watches its immediate
// predecessor only.
var Exclusive Rule = exclusive{}

type exclusive struct{ base }

func (exclusive) joinReads(q *Queue) []clientv3.Op {
	return []clientv3.Op{clientv3.OpGet(q.prefix, append(clientv3.WithLastCreate(), clientv3.WithKeysOnly())...)}
}

func (exclusive) vacant(q *Queue) (clientv3.Cmp, bool) {
	return clientv3.Compare(clientv3.CreateRevision(q.prefix), "=", 0).WithPrefix(), true
}

func (exclusive) queuedAtJoin(reads []*pb.ResponseOp) (bool, int64) {
	return predecessor(reads) != nil, -1
}

// predecessor returns the entry a one-range join read found, or nil.
func predecessor(reads []*pb.ResponseOp) *mvccpb.KeyValue {
	if kvs := reads[0].GetResponseRange().Kvs; len(kvs) > 0 {
		return kvs[0]
	}
	return nil
}

func (exclusive) wait(ctx context.Context, q *Queue, e entry, reads []*pb.ResponseOp) error {
	return q.waitFirst(ctx, e, predecessor(reads), e.Rev+1)
}

// Reader grants an RW reader when no writer precedes it (readers share).
// Reader keys go under "<prefix>r/", which sorts after every writer key
// (lease-slot names are hex), so the writers are the range [prefix,
// prefix+"r/"). A waiting reader watches only the last writer before it:
// a writer's release grants the run of readers behind it at once.
var Reader Rule = reader{}

type reader struct{ base }

func (reader) keyPrefix(q *Queue) string { return q.prefix + "r/" }

func (reader) joinReads(q *Queue) []clientv3.Op {
	return []clientv3.Op{clientv3.OpGet(q.prefix, lastWriter(q)...)}
}

// lastWriter are the options of a read of the last writer key.
func lastWriter(q *Queue, more ...clientv3.OpOption) []clientv3.OpOption {
	return append([]clientv3.OpOption{
		clientv3.WithRange(q.prefix + "r/"), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1),
	}, more...)
}

func (reader) vacant(q *Queue) (clientv3.Cmp, bool) {
	return clientv3.Compare(clientv3.CreateRevision(q.prefix), "=", 0).WithRange(q.prefix + "r/"), true
}

func (reader) queuedAtJoin(reads []*pb.ResponseOp) (bool, int64) {
	return predecessor(reads) != nil, -1
}

func (reader) wait(ctx context.Context, q *Queue, e entry, reads []*pb.ResponseOp) error {
	return q.waitReader(ctx, e, predecessor(reads), e.Rev+1)
}

// ExclusiveDelay is Exclusive with lock-delay d: when the grant before an
// entry ended without a release (its session expired or was revoked), the
// entry is granted only d after it saw that end. Each entry carries a
// shadow key without a lease, "<root>/<name>%delay/<lease>-<slot>", put
// with it and deleted with it by a release or an abandon, but not by the
// lease's end: an entry that is first and finds a shadow older than itself
// (an orphan) knows that an earlier grant ended without a release.
func ExclusiveDelay(d time.Duration) Rule { return delayed{d: d} }

type delayed struct {
	exclusive
	d time.Duration
}

func shadowPrefix(q *Queue) string { return strings.TrimSuffix(q.prefix, "/") + "%delay/" }

func (delayed) sideKeys(q *Queue, key string) []string {
	return []string{shadowPrefix(q) + strings.TrimPrefix(key, q.prefix)}
}

func (r delayed) wait(ctx context.Context, q *Queue, e entry, reads []*pb.ResponseOp) error {
	if err := r.exclusive.wait(ctx, q, e, reads); err != nil {
		return err
	}
	return q.waitOrphans(ctx, e, r.d)
}

// Shared grants an entry when fewer than n entries precede it: a
// semaphore with n permits. Entries store their n ("permits=3 owner"), and
// an entry whose queue's first entry has another n is refused
// (ErrPermits). A waiter keeps the count of entries before it from one
// watch on the queue: a release makes only the waiter it grants issue a
// request (see "Semaphores" in docs/queue.md).
func Shared(n int) Rule { return shared{n: n} }

type shared struct {
	base
	n int
}

const permitsTag = "permits="

func (r shared) value(val string) string { return permitsTag + strconv.Itoa(r.n) + " " + val }

// permitsOf parses an entry value's number of permits (0: none).
func permitsOf(v []byte) int {
	n, _, _ := ParsePermits(v)
	return n
}

// ParsePermits splits a Shared entry's value ("permits=3 owner") into its
// number of permits and the value given to Acquire; ok is false for the
// value of an entry of another rule (the value alone).
func ParsePermits(v []byte) (permits int, val string, ok bool) {
	s, rest, _ := strings.Cut(string(v), " ")
	if !strings.HasPrefix(s, permitsTag) {
		return 0, "", false
	}
	n, err := strconv.Atoi(strings.TrimPrefix(s, permitsTag))
	if err != nil || n <= 0 {
		return 0, "", false
	}
	return n, rest, true
}

func (shared) joinReads(q *Queue) []clientv3.Op {
	return []clientv3.Op{
		clientv3.OpGet(q.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(q.prefix, clientv3.WithFirstCreate()...),
	}
}

func (r shared) admit(reads []*pb.ResponseOp) error {
	if kvs := reads[1].GetResponseRange().Kvs; len(kvs) > 0 {
		if have := permitsOf(kvs[0].Value); have != r.n {
			return &PermitsError{Want: r.n, Have: have}
		}
	}
	return nil
}

// aheadAtJoin is the number of entries before the entry, as a Shared
// rule's enqueue read it (its first join read counts them).
func aheadAtJoin(reads []*pb.ResponseOp) int64 { return reads[0].GetResponseRange().Count }

func (r shared) queuedAtJoin(reads []*pb.ResponseOp) (bool, int64) {
	ahead := aheadAtJoin(reads)
	return ahead >= int64(r.n), ahead
}

func (r shared) wait(ctx context.Context, q *Queue, e entry, reads []*pb.ResponseOp) error {
	return q.waitShared(ctx, e, int64(r.n), aheadAtJoin(reads))
}
