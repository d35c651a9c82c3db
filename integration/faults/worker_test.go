package faults_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/faults"
	"github.com/dlock-go/dlock/internal/queue"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

// contention is a set of workers contending on one lock, each writing to a
// fenced register while it holds the lock. It records a FencedMutex and a
// FencedRegister history and checks exclusion with an in-process counter.
type contention struct {
	name    string
	ttl     time.Duration
	res     *resource
	mutexes *faults.History // FencedMutex
	logf    func(format string, args ...any)
	tb      testing.TB

	holding  atomic.Int32
	overlaps atomic.Int32 // grants that found another holder in its section
	lost     atomic.Int32 // grants lost before their section ended
	errs     atomic.Int64 // transient errors tolerated (Lock, Unlock, session)

	mu     sync.Mutex
	tokens []uint64      // in grant order (appended inside the section)
	notify chan struct{} // closed and replaced at every grant

	steps   sync.Map // worker id → what it is doing and since when
	clients sync.Map // worker id → its client, to inspect a stall
	lastErr sync.Map // worker id → its last error and when
}

// phaseBound bounds one waitGrants: a phase takes seconds, so a phase
// that takes minutes is a stall, reported with every worker's step.
const phaseBound = 2 * time.Minute

func newContention(t testing.TB, name string, ttl time.Duration) *contention {
	hist := faults.NewHistory()
	return &contention{
		name:    name,
		ttl:     ttl,
		res:     newResource(t, true, hist),
		mutexes: faults.NewHistory(),
		logf:    t.Logf,
		tb:      t,
		notify:  make(chan struct{}),
	}
}

// grants returns the number of grants so far.
func (c *contention) grants() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.tokens)
}

// waitGrants waits until there have been at least n grants, for at most
// phaseBound. Its error names what each worker is doing.
func (c *contention) waitGrants(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, phaseBound)
	defer cancel()
	for {
		c.mu.Lock()
		got, ch := len(c.tokens), c.notify
		c.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%d grants of %d: %w; workers: %s; etcd: %s; goroutines: %s", got, n, ctx.Err(), c.where(), c.etcdState(), c.dumpGoroutines())
		}
	}
}

// step records what worker id is doing now.
func (c *contention) step(id int, what string) {
	c.steps.Store(id, what+" since "+time.Now().Format("15:04:05.000"))
}

// where describes every worker's current step.
func (c *contention) where() string {
	var ws []string
	c.steps.Range(func(id, what any) bool {
		last, _ := c.lastErr.Load(id)
		ws = append(ws, fmt.Sprintf("%d: %s (last error: %v)", id, what, last))
		return true
	})
	slices.Sort(ws)
	return strings.Join(ws, "; ")
}

// etcdState describes, for a stalled phase, each member's revision and
// leader and the lock's queue: every key with its create revision, lease
// and the lease's remaining TTL.
func (c *contention) etcdState() string {
	var cli *clientv3.Client
	c.clients.Range(func(_, v any) bool { cli = v.(*clientv3.Client); return false })
	if cli == nil {
		return "no client"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	for _, ep := range cli.Endpoints() {
		st, err := cli.Status(ctx, ep)
		if err != nil {
			fmt.Fprintf(&b, "[%s: %v] ", ep, err)
			continue
		}
		fmt.Fprintf(&b, "[%s: member %x rev %d leader %x] ", ep, st.Header.MemberId, st.Header.Revision, st.Leader)
	}
	resp, err := cli.Get(ctx, queue.PrefixFor(lock.DefaultPrefix, c.name), clientv3.WithPrefix())
	if err != nil {
		return b.String() + err.Error()
	}
	fmt.Fprintf(&b, "queue at rev %d:", resp.Header.Revision)
	for _, kv := range resp.Kvs {
		ttl := int64(-1)
		if l, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease)); err == nil {
			ttl = l.TTL
		}
		fmt.Fprintf(&b, " %s (rev %d, lease %x ttl %d)", kv.Key, kv.CreateRevision, kv.Lease, ttl)
	}
	return b.String()
}

// dumpGoroutines writes every goroutine's stack to the artifact
// directory, for a stalled phase, and returns the file's path.
func (c *contention) dumpGoroutines() string {
	path := filepath.Join(faults.ArtifactDir(c.tb), fmt.Sprintf("goroutines-%s-%d.txt", c.name, time.Now().UnixNano()))
	f, err := os.Create(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if err := pprof.Lookup("goroutine").WriteTo(f, 2); err != nil {
		return err.Error()
	}
	return path
}

// run is worker id's loop on client cli until stop closes or ctx ends.
func (c *contention) run(ctx context.Context, id int, cli *clientv3.Client, stop <-chan struct{}, hold func()) {
	c.clients.Store(id, cli)
	var s *session.Session
	defer func() {
		c.step(id, "exited")
		if s != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s.Close(cctx)
		}
	}()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		if s == nil || isDone(s.Done()) {
			c.step(id, "new session")
			if s != nil {
				c.errs.Add(1)
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				s.Close(cctx)
				cancel()
			}
			var err error
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			s, err = session.New(sctx, cli, session.WithTTL(c.ttl))
			cancel()
			if err != nil {
				c.errs.Add(1)
				s = nil
				backoff(ctx)
				continue
			}
		}
		m, err := lock.New(s, c.name)
		if err != nil {
			c.logf("worker %d: %v", id, err)
			return
		}
		c.step(id, fmt.Sprintf("lock (lease %x)", int64(s.Lease())))
		call := c.mutexes.Now()
		lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		h, err := m.Lock(lctx)
		cancel()
		if err != nil {
			c.step(id, "backoff")
			c.lastErr.Store(id, err.Error()+" at "+time.Now().Format("15:04:05.000"))
			c.errs.Add(1)
			backoff(ctx)
			if strings.Contains(err.Error(), "removing key") {
				// The failed acquire's key may remain in the queue, bound to
				// this session: start a new one rather than queue behind it.
				c.logf("worker %d: %v", id, err)
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				s.Close(cctx)
				cancel()
				s = nil
			}
			continue
		}
		granted := c.mutexes.Now()
		tok := h.Token()
		c.mutexes.Add(id, call, faults.MutexInput{Token: tok.Seq}, nil, granted)

		if c.holding.Add(1) > 1 {
			c.overlaps.Add(1)
		}
		c.mu.Lock()
		c.tokens = append(c.tokens, tok.Seq)
		close(c.notify)
		c.notify = make(chan struct{})
		c.mu.Unlock()
		c.step(id, fmt.Sprintf("section %d", tok.Seq))
		c.section(id, tok, hold)
		lostInSection := isDone(h.Done())
		c.holding.Add(-1)

		c.step(id, fmt.Sprintf("unlock %d", tok.Seq))
		rcall := c.mutexes.Now()
		err = unlockRetry(ctx, h)
		switch {
		case err == nil && !lostInSection:
			c.mutexes.Add(id, rcall, faults.MutexInput{Release: true, Token: tok.Seq}, nil, c.mutexes.Now())
		case err == nil || errors.Is(err, lock.ErrLockLost):
			// Lost at some point after the grant.
			c.lost.Add(1)
			c.mutexes.Add(id, granted, faults.MutexInput{Release: true, Token: tok.Seq}, nil, c.mutexes.Now())
		default:
			// Unknown: the key may linger until the session ends. End it.
			c.errs.Add(1)
			c.lost.Add(1)
			c.logf("worker %d: unlock %v: %v", id, tok, err)
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			s.Close(cctx)
			cancel()
			s = nil
			c.mutexes.Add(id, granted, faults.MutexInput{Release: true, Token: tok.Seq}, nil, c.mutexes.Now())
		}
	}
}

// section is the critical section: a fenced write of the token, then a read.
func (c *contention) section(id int, tok fence.Token, hold func()) {
	call := c.res.hist.Now()
	v := fmt.Sprintf("w%d@%d", id, tok.Seq)
	admitted := c.res.write(tok, v)
	c.res.hist.Add(id, call, faults.RegisterInput{Token: tok.Seq, Value: v}, faults.RegisterOutput{Admitted: admitted}, c.res.hist.Now())
	if hold != nil {
		hold()
	}
	c.res.read(id)
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// strictlyIncreasing returns the first index i with s[i] <= s[i-1], or -1.
func strictlyIncreasing(s []uint64) int {
	for i := 1; i < len(s); i++ {
		if s[i] <= s[i-1] {
			return i
		}
	}
	return -1
}

// backoff paces a retry after an error (a member down answers at once).
func backoff(ctx context.Context) {
	t := time.NewTimer(50 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
