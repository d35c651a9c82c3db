package faults_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/faults"
	"github.com/dlock-go/dlock/internal/queue"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

// contention is a set of workers contending on one lock of one kind. Each
// grant's critical section holds for a random 1-30 ms (drawn from the
// worker's own stream of the seed), long enough for the real-time
// exclusion check to see an overlap. An exclusive grant of a fenced kind
// writes its token to a fenced register and reads it back; the grants
// are recorded as a FencedMutex history and the register as a
// FencedRegister history. check runs every check on the record.
type contention struct {
	kind    kind
	name    string
	ttl     time.Duration
	seed    uint64
	res     *resource
	mutexes *faults.History // FencedMutex, exclusive grants only
	excl    *exclusion
	logf    func(format string, args ...any)
	tb      testing.TB

	lost atomic.Int32 // grants lost before their section ended
	errs atomic.Int64 // transient errors tolerated (Lock, Unlock, session)

	mu        sync.Mutex
	count     int           // grants so far
	perWorker map[int]int   // worker id → its grants
	tokens    []uint64      // exclusive grants' tokens, in grant order (appended inside the section)
	notify    chan struct{} // closed and replaced at every grant

	steps   sync.Map // worker id → what it is doing and since when
	clients sync.Map // worker id → its client, to inspect a stall
	lastErr sync.Map // worker id → its last error and when
}

// phaseBound bounds one waitGrants: a phase takes seconds, so a phase
// that takes minutes is a stall, reported with every worker's step.
const phaseBound = 2 * time.Minute

// lockAttempt bounds one acquire of a worker (Lock, Acquire, Campaign).
const lockAttempt = 15 * time.Second

// holdMin and holdMax bound a critical section's hold.
const (
	holdMin = time.Millisecond
	holdMax = 30 * time.Millisecond
)

// newContention returns workers (not started: see run) on the lock of kind
// k called name, with sessions of ttl, drawing from seed.
func newContention(t testing.TB, k kind, name string, ttl time.Duration, seed uint64) *contention {
	hist := faults.NewHistory()
	return &contention{
		kind:      k,
		name:      name,
		ttl:       ttl,
		seed:      seed,
		res:       newResource(t, true, hist),
		mutexes:   faults.NewHistory(),
		excl:      newExclusion(k.limit),
		logf:      t.Logf,
		tb:        t,
		perWorker: make(map[int]int),
		notify:    make(chan struct{}),
	}
}

// rngFor returns worker id's stream: a function of the seed, the lock's
// name and id only.
func (c *contention) rngFor(id int) *rand.Rand {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", c.name, id)
	return rand.New(rand.NewPCG(c.seed, h.Sum64()))
}

// grants returns the number of grants so far.
func (c *contention) grants() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count
}

// waitGrants waits until there have been at least n grants, for at most
// phaseBound. Its error names what each worker is doing.
func (c *contention) waitGrants(ctx context.Context, n int) error {
	return c.waitGrantsWithin(ctx, n, phaseBound)
}

// waitGrantsWithin waits until there have been at least n grants, for at
// most bound.
func (c *contention) waitGrantsWithin(ctx context.Context, n int, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for {
		c.mu.Lock()
		got, ch := c.count, c.notify
		c.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%s %q: %d grants of %d: %w; workers: %s; etcd: %s; goroutines: %s", c.kind.name, c.name, got, n, ctx.Err(), c.where(), c.etcdState(), c.dumpGoroutines())
		}
	}
}

// waitWorkerGrants waits until worker id has been granted at least n
// times, for at most bound.
func (c *contention) waitWorkerGrants(ctx context.Context, id, n int, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for {
		c.mu.Lock()
		got, ch := c.perWorker[id], c.notify
		c.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			last, _ := c.lastErr.Load(id)
			step, _ := c.steps.Load(id)
			return fmt.Errorf("%s %q worker %d: %d grants of %d: %w; doing %v (last error: %v); workers: %s", c.kind.name, c.name, id, got, n, ctx.Err(), step, last, c.where())
		}
	}
}

// workerGrants returns how many times worker id has been granted.
func (c *contention) workerGrants(id int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.perWorker[id]
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
	resp, err := cli.Get(ctx, queue.PrefixFor(c.kind.prefix, c.name), clientv3.WithPrefix())
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
// Each round starts with the same two draws from the worker's stream (the
// hold, and the roll the kind's acquire may use), so a worker's sequence
// of draws is the seed's; which grant takes which draw depends on how many
// rounds failed.
func (c *contention) run(ctx context.Context, id int, cli *clientv3.Client, stop <-chan struct{}) {
	c.clients.Store(id, cli)
	rng := c.rngFor(id)
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
		hold := holdMin + time.Duration(rng.Int64N(int64(holdMax-holdMin)+1))
		roll := rng.Uint64()
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
		c.step(id, fmt.Sprintf("%s (lease %x)", c.kind.name, int64(s.Lease())))
		call := c.mutexes.Now()
		lctx, cancel := context.WithTimeout(ctx, lockAttempt)
		h, shared, err := c.kind.acquire(lctx, s, c.name, id, roll)
		cancel()
		if err != nil {
			if errors.Is(err, lock.ErrInvalidName) || errors.Is(err, lock.ErrInvalidOption) {
				c.logf("worker %d: %v", id, err)
				return
			}
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
		exclusive := !shared && c.kind.limit == 1
		if exclusive {
			c.mutexes.Add(id, call, faults.MutexInput{Token: tok.Seq}, nil, granted)
		}

		c.excl.enter(id, shared, tok.Seq, h.Done())
		c.mu.Lock()
		c.count++
		c.perWorker[id]++
		if exclusive {
			c.tokens = append(c.tokens, tok.Seq)
		}
		close(c.notify)
		c.notify = make(chan struct{})
		c.mu.Unlock()
		c.step(id, fmt.Sprintf("section %d (shared %v, hold %v)", tok.Seq, shared, hold))
		c.section(id, tok, exclusive, hold, h.Done())
		lostInSection := isDone(h.Done())
		c.excl.exit(id)

		c.step(id, fmt.Sprintf("unlock %d", tok.Seq))
		rcall := c.mutexes.Now()
		err = unlockRetry(ctx, h)
		release := func(call int64) {
			if exclusive {
				c.mutexes.Add(id, call, faults.MutexInput{Release: true, Token: tok.Seq}, nil, c.mutexes.Now())
			}
		}
		switch {
		case err == nil && !lostInSection:
			release(rcall)
		case err == nil || errors.Is(err, lock.ErrLockLost):
			// Lost at some point after the grant.
			c.lost.Add(1)
			release(granted)
		default:
			// Unknown: the key may linger until the session ends. End it.
			c.errs.Add(1)
			c.lost.Add(1)
			c.logf("worker %d: unlock %v: %v", id, tok, err)
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			s.Close(cctx)
			cancel()
			s = nil
			release(granted)
		}
	}
}

// section is the critical section. An exclusive grant of a fenced kind
// writes its token to the fenced register; then the grant is held for
// hold, or until done closes (a holder stops acting when its grant may
// be lost); then a fenced kind's grant reads the register.
func (c *contention) section(id int, tok fence.Token, exclusive bool, hold time.Duration, done <-chan struct{}) {
	if c.kind.fenced && exclusive {
		call := c.res.hist.Now()
		v := fmt.Sprintf("w%d@%d", id, tok.Seq)
		admitted := c.res.write(tok, v)
		c.res.hist.Add(id, call, faults.RegisterInput{Token: tok.Seq, Value: v}, faults.RegisterOutput{Admitted: admitted}, c.res.hist.Now())
	}
	timer := time.NewTimer(hold) // the section's length, not a synchronisation
	select {
	case <-timer.C:
	case <-done:
		timer.Stop()
	}
	if c.kind.fenced {
		c.res.read(id)
	}
}

// check runs every check on what the workers recorded and returns what
// failed, one line each; nil means all hold: no violation of the
// real-time exclusion check, the exclusive grants' tokens strictly
// increasing in grant order, and (fenced kinds) the FencedMutex and
// FencedRegister histories linearizable. A failed porcupine check writes
// its visualization (see faults.Check).
func (c *contention) check(t testing.TB) []string {
	t.Helper()
	var bad []string
	if n, first := c.excl.report(); n > 0 {
		bad = append(bad, fmt.Sprintf("%s %q: %d exclusion violations (limit %d live grants), first: %s", c.kind.name, c.name, n, c.kind.limit, strings.Join(first, "; ")))
	}
	c.mu.Lock()
	tokens := append([]uint64(nil), c.tokens...)
	c.mu.Unlock()
	if i := strictlyIncreasing(tokens); i != -1 {
		bad = append(bad, fmt.Sprintf("%s %q: token %d granted after %d (grant %d)", c.kind.name, c.name, tokens[i], tokens[i-1], i))
	}
	if c.kind.fenced {
		if res, path := faults.Check(t, faults.FencedMutex, c.mutexes.Ops()); res != porcupine.Ok {
			bad = append(bad, fmt.Sprintf("%s %q: mutex history %s; visualization: %s", c.kind.name, c.name, res, path))
		}
		if res, path := faults.Check(t, faults.FencedRegister, c.res.hist.Ops()); res != porcupine.Ok {
			bad = append(bad, fmt.Sprintf("%s %q: register history %s; visualization: %s", c.kind.name, c.name, res, path))
		}
	}
	return bad
}

// idle returns the workers among 0..n-1 that were never granted.
func (c *contention) idle(n int) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []int
	for id := range n {
		if c.perWorker[id] == 0 {
			ids = append(ids, id)
		}
	}
	return ids
}

// figures describes the run in one line.
func (c *contention) figures() string {
	maxLive, tolerated := c.excl.figures()
	c.mu.Lock()
	n := c.count
	c.mu.Unlock()
	return fmt.Sprintf("%s %q: %d grants, %d lost, %d transient errors, at most %d live at once, %d overlaps with an ended grant",
		c.kind.name, c.name, n, c.lost.Load(), c.errs.Load(), maxLive, tolerated)
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
