package election

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/internal/grant"
	"github.com/dlock-go/dlock/internal/option"
	"github.com/dlock-go/dlock/internal/queue"
	"github.com/dlock-go/dlock/session"
)

// Leader is the state of an election as Leader and Observe report it: the
// leader's value and epoch. The zero Leader means "no leader".
//
// Leader is a small value type: copy and compare it freely.
type Leader struct {
	Value string // the value the leader campaigned with or last proclaimed
	Epoch uint64 // the leader's fence.Token Seq: its key's create revision
}

// Election is a named election: a handle to campaign in (Campaign) and to
// watch (Leader, Observe). It is safe for concurrent use; every Campaign
// call is an independent candidate with its own key.
//
// Each Campaign runs on the session its Source gives at that moment: on a
// *session.Session, once that session has ended every Campaign fails with
// ErrSessionDone; on a *session.Manager, a Campaign after a session ended
// runs on a fresh session.
type Election struct {
	q    *queue.Queue
	path grant.Path
	hook func(rev int64) // options.readHook
}

// New returns the election called name on src: a *session.Session or a
// *session.Manager. The name must pass lock.ValidateName: errors match
// both ErrInvalidName and lock.ErrInvalidName. A nil source or a bad option
// returns an error matching ErrInvalidOption. New does no I/O.
func New(src session.Source, name string, opts ...Option) (*Election, error) {
	o := defaults()
	return newElection(src, name, &o, func() error { return option.Apply(&o, opts) })
}

// newElection is New with apply applying the options to o (nil: they are
// applied already): the construction that package lock's etcd locks share
// (grant.New).
func newElection(src session.Source, name string, o *options, apply func() error) (*Election, error) {
	p, err := grant.New(src, name, &o.Options, sentinels, apply)
	if err != nil {
		return nil, err
	}
	p.Term = true
	return &Election{q: p.Queue(queue.Exclusive), path: p, hook: o.readHook}, nil
}

// Campaign puts a candidate key holding value, bound to the session's
// lease, and waits in create-revision order until it is the first key: then
// it returns the leader's Term. Before reporting leadership it has read, in
// the same request that found no predecessor left, that its own key still
// exists (etcd issue #19597: concurrency.Election.Campaign can report
// leadership after its lease expired), and it checks that the session is
// still live.
//
// On any error the candidate's key is deleted with a context detached from
// ctx and bounded by a few seconds, so a failed Campaign leaves nothing
// behind. When ctx ends, the error matches ctx.Err(). When the session ends
// before or while campaigning, the error matches ErrSessionDone and
// Campaign never returns a Term. When the key is deleted by someone else
// while waiting, the error matches ErrKeyDeleted.
func (el *Election) Campaign(ctx context.Context, value string) (*Term, error) {
	h, err := el.path.Acquire(ctx, el.q, "campaign", value, false)
	if err != nil {
		return nil, err
	}
	return &Term{el: el, h: h, value: value}, nil
}

// Leader returns the current leader: the value and epoch of the first key
// by create revision. It returns an error matching ErrNoLeader if there is
// none. The read is linearizable.
func (el *Election) Leader(ctx context.Context) (Leader, error) {
	resp, err := el.path.Client.Get(ctx, el.q.Prefix(), clientv3.WithFirstCreate()...)
	if err != nil {
		return Leader{}, sentinels.Op(el.path.Name, "leader", false, el.q.Denied(err))
	}
	if len(resp.Kvs) == 0 {
		return Leader{}, sentinels.Op(el.path.Name, "leader", false, ErrNoLeader)
	}
	kv := resp.Kvs[0]
	return Leader{Value: string(kv.Value), Epoch: uint64(kv.CreateRevision)}, nil
}

// Observe returns a channel that delivers the election's state: first the
// current one, then every change of leader, every "no leader" (the zero
// Leader) and every value a leader proclaims, in order. A slow reader may
// miss intermediate states but always gets the latest one; Observe never
// delivers a leader with a lower epoch than one it already delivered, and
// never the same state twice in a row. It survives watch compaction, etcd
// leader changes and reconnects by re-reading the keys and resuming.
//
// Observe runs one goroutine, which ends when ctx ends; the channel is then
// closed. It does not use the session (only its client), so it keeps
// working after the session ends.
func (el *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	ob := observer{cli: el.path.Client, prefix: el.q.Prefix(), hook: el.hook}
	go ob.run(ctx, out)
	return out
}
