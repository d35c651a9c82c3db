package capacity

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

// The implementations compared, side by side, in every scenario.
const (
	ImplDlock       = "dlock"       // session.Session + lock.Mutex
	ImplConcurrency = "concurrency" // etcd's concurrency.Session + concurrency.Mutex
	ImplLimit       = "limit"       // a bare lease + Txn put-if-absent + guarded delete
)

// Impls lists the implementations in the order the rows show them.
func Impls() []string { return []string{ImplDlock, ImplConcurrency, ImplLimit} }

// sess is one session of an implementation: a lease kept alive, on which
// locks are taken. It stands for one production process.
type sess interface {
	// lock takes name, waiting in the implementation's order; watch asks
	// the implementation to watch the grant for loss as a user would.
	lock(ctx context.Context, name string, watch bool) (held, error)
	// renewed returns a value that changes with each acknowledged
	// keepalive.
	renewed() int64
	// done is closed when the session has ended.
	done() <-chan struct{}
	close(ctx context.Context) error
}

// held is one grant.
type held interface {
	unlock(ctx context.Context) error
	// rev returns the create revision of the grant's key: the order it
	// was enqueued in.
	rev(ctx context.Context) (int64, error)
}

// newSess starts a session of impl on cli, its lock keys under root.
// queued is called once by a limit lock that found the key taken and
// waits for it (the limit has no queue of keys to count).
func newSess(ctx context.Context, impl string, cli *clientv3.Client, root string, ttl time.Duration, queued func()) (sess, error) {
	switch impl {
	case ImplDlock:
		s, err := session.New(ctx, cli, session.WithTTL(ttl))
		if err != nil {
			return nil, err
		}
		return &dlockSess{s: s, root: root}, nil
	case ImplConcurrency, ImplLimit:
		ls, err := newLeaseSess(ctx, cli, ttl)
		if err != nil {
			return nil, err
		}
		if impl == ImplLimit {
			return &limitSess{leaseSess: ls, root: root, queued: queued}, nil
		}
		cs, err := concurrency.NewSession(cli, concurrency.WithLease(ls.id), concurrency.WithContext(ls.ctx))
		if err != nil {
			ls.close(ctx)
			return nil, fmt.Errorf("concurrency session: %w", err)
		}
		return &concSess{leaseSess: ls, cs: cs, root: root}, nil
	}
	return nil, fmt.Errorf("capacity: unknown implementation %q", impl)
}

type dlockSess struct {
	s    *session.Session
	root string

	mu      sync.Mutex
	mutexes map[string]*lock.Mutex
}

func (d *dlockSess) lock(ctx context.Context, name string, watch bool) (held, error) {
	m, err := d.mutex(name)
	if err != nil {
		return nil, err
	}
	h, err := m.Lock(ctx)
	if err != nil {
		return nil, err
	}
	if watch {
		_ = h.Done() // watched for loss, as a holder that checks Done
	}
	return dlockHeld{h}, nil
}

// mutex returns the session's Mutex called name, made on first use: a
// user makes a lock once and locks it many times (lock.New builds the
// queue's requests once per lock).
func (d *dlockSess) mutex(name string) (*lock.Mutex, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if m, ok := d.mutexes[name]; ok {
		return m, nil
	}
	m, err := lock.New(d.s, name, lock.WithPrefix(d.root))
	if err != nil {
		return nil, err
	}
	if d.mutexes == nil {
		d.mutexes = make(map[string]*lock.Mutex)
	}
	d.mutexes[name] = m
	return m, nil
}

func (d *dlockSess) renewed() int64                  { return d.s.Deadline().UnixNano() }
func (d *dlockSess) done() <-chan struct{}           { return d.s.Done() }
func (d *dlockSess) close(ctx context.Context) error { return d.s.Close(ctx) }

type dlockHeld struct{ h lock.Held }

func (h dlockHeld) unlock(ctx context.Context) error { return h.h.Unlock(ctx) }
func (h dlockHeld) rev(context.Context) (int64, error) {
	return int64(h.h.Token().Seq), nil
}

// leaseSess is a lease kept alive by the client's KeepAlive stream, as
// concurrency.Session keeps it; ack is the time of the last keepalive
// response.
type leaseSess struct {
	cli    *clientv3.Client
	id     clientv3.LeaseID
	ctx    context.Context
	cancel context.CancelFunc
	ack    atomic.Int64
	ended  chan struct{}
}

func newLeaseSess(ctx context.Context, cli *clientv3.Client, ttl time.Duration) (*leaseSess, error) {
	g, err := cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return nil, fmt.Errorf("grant: %w", err)
	}
	kctx, cancel := context.WithCancel(context.Background())
	ch, err := cli.KeepAlive(kctx, g.ID)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("keepalive: %w", err)
	}
	ls := &leaseSess{cli: cli, id: g.ID, ctx: kctx, cancel: cancel, ended: make(chan struct{})}
	ls.ack.Store(time.Now().UnixNano())
	go func() {
		defer close(ls.ended)
		for range ch {
			ls.ack.Store(time.Now().UnixNano())
		}
	}()
	return ls, nil
}

func (l *leaseSess) renewed() int64        { return l.ack.Load() }
func (l *leaseSess) done() <-chan struct{} { return l.ended }
func (l *leaseSess) close(ctx context.Context) error {
	l.cancel()
	<-l.ended
	_, err := l.cli.Revoke(ctx, l.id)
	return err
}

type concSess struct {
	*leaseSess
	cs   *concurrency.Session
	root string
}

func (c *concSess) lock(ctx context.Context, name string, _ bool) (held, error) {
	m := concurrency.NewMutex(c.cs, c.root+"/"+name)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return concHeld{m: m, cli: c.cli}, nil
}

func (c *concSess) close(ctx context.Context) error {
	err := c.cs.Close() // revokes the lease
	c.cancel()
	<-c.ended
	return err
}

type concHeld struct {
	m   *concurrency.Mutex
	cli *clientv3.Client
}

func (h concHeld) unlock(ctx context.Context) error { return h.m.Unlock(ctx) }
func (h concHeld) rev(ctx context.Context) (int64, error) {
	r, err := h.cli.Get(ctx, h.m.Key())
	if err != nil {
		return 0, err
	}
	if len(r.Kvs) == 0 {
		return 0, errors.New("capacity: concurrency key gone")
	}
	return r.Kvs[0].CreateRevision, nil
}

// limitSess is the limit: the lock key put if absent on the session's
// lease, deleted only by its own creator. It has no queue: a waiter
// watches the key and tries again when it is deleted, with every other
// waiter (a herd).
type limitSess struct {
	*leaseSess
	root   string
	queued func()
}

func (l *limitSess) lock(ctx context.Context, name string, _ bool) (held, error) {
	key := l.root + "/" + name
	told := false
	for {
		r, err := l.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, "", clientv3.WithLease(l.id))).
			Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return nil, err
		}
		if r.Succeeded {
			return limitHeld{cli: l.cli, key: key, created: r.Header.Revision}, nil
		}
		if err := l.waitDelete(ctx, key, r.Header.Revision+1, &told); err != nil {
			return nil, err
		}
	}
}

func (l *limitSess) waitDelete(ctx context.Context, key string, from int64, told *bool) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := l.cli.Watch(wctx, key, clientv3.WithRev(from), clientv3.WithFilterPut())
	if !*told && l.queued != nil {
		*told = true
		l.queued()
	}
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return err
		}
		if len(wr.Events) > 0 {
			return nil
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("capacity: watch ended")
}

type limitHeld struct {
	cli     *clientv3.Client
	key     string
	created int64
}

func (h limitHeld) unlock(ctx context.Context) error {
	_, err := h.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.created)).
		Then(clientv3.OpDelete(h.key)).Commit()
	return err
}
func (h limitHeld) rev(context.Context) (int64, error) { return h.created, nil }
