package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/election"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/cluster/history"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

// worker is one client's state. It is used by one goroutine at a time
// (the main one, or election.Run's calls of OnElected from it).
type worker struct {
	cfg   config
	cli   *clientv3.Client
	hist  *history.Writer
	http  *http.Client
	rng   *rand.Rand
	ends  *sessionEnds
	guard store     // -guard's resource (guard.go); nil: the resource's /fenced
	pay   *payments // the payments workloads' use of a grant (payments.go); nil for the others
	err   error     // the first history write error: the run is void after it

	g      int    // the last grant number used
	grants int    // grants so far
	first  uint64 // the first grant's token (plant first-token)
	open   int64  // when the current grant's Done was last seen open (stamped before the check)
}

// grant is what the worker uses of a lock.Held or an *election.Term.
type grant interface {
	Token() fence.Token
	Done() <-chan struct{}
	Err() error
}

// emit appends ev to the history, with the worker's W and workload. A
// write error is kept in w.err; the loops stop on it.
func (w *worker) emit(ev history.Event) {
	ev.W, ev.Workload = w.cfg.id, w.cfg.workload
	if err := w.hist.Write(ev); err != nil && w.err == nil {
		w.err = fmt.Errorf("history: %w", err)
	}
}

// phase prints a phase line. os.Stdout is unbuffered: the line is in the
// pipe when this returns.
func (w *worker) phase(name string, g int) {
	fmt.Fprintf(os.Stdout, "PHASE %s %d\n", name, g)
}

// more reports whether to acquire again.
func (w *worker) more(stop context.Context) bool {
	return w.err == nil && stop.Err() == nil && (w.cfg.rounds == 0 || w.grants < w.cfg.rounds)
}

// acquire starts grant number g: the phase line and Event acquire.
func (w *worker) acquire(mode, via string) int {
	w.g++
	w.phase("acquire", w.g)
	w.emit(history.Event{G: w.g, Kind: history.Acquire, T: history.Now(), Mode: mode, Via: via})
	return w.g
}

// via draws how the next acquire is made: "try" with probability -try,
// for the mutex "all" (LockAll) with the same probability, else "" (the
// blocking call).
func (w *worker) via() string {
	r := w.rng.Float64()
	switch {
	case r < w.cfg.try:
		return "try"
	case w.cfg.workload == "mutex" && r < 2*w.cfg.try:
		return "all"
	}
	return ""
}

// failed records a failed acquire of g. It reports whether err is fatal
// (a bad name, option or permits: no retry can succeed).
func (w *worker) failed(g int, err error) (fatal bool) {
	w.emit(history.Event{G: g, Kind: history.Fail, T: history.Now(), Err: err.Error()})
	if !errors.Is(err, lock.ErrLocked) { // a refused try is no news
		log.Printf("g%d: acquire: %v", g, err)
	}
	return errors.Is(err, lock.ErrInvalidName) || errors.Is(err, lock.ErrInvalidOption) ||
		errors.Is(err, lock.ErrPermitsMismatch) || errors.Is(err, session.ErrInvalidOption)
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// between returns a random duration in [lo, hi).
func (w *worker) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)))
}

// holdTime draws one hold: rand[0, -hold).
func (w *worker) holdTime() time.Duration {
	if w.cfg.hold <= 0 {
		return 0
	}
	return time.Duration(w.rng.Int64N(int64(w.cfg.hold)))
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// runLocks is the loop of the lock workloads and of the payments
// workloads (whose grants w.pay uses), on one session at a time: when it
// ends, the next acquire opens a new one.
func (w *worker) runLocks(stop context.Context) error {
	var s *session.Session
	var locker func(mode, via string) acquireFunc
	defer func() {
		if s != nil {
			w.closeSession(s)
		}
	}()
	for w.more(stop) {
		if s == nil || isClosed(s.Done()) {
			if s != nil {
				log.Printf("session %x ended: %v", int64(s.Lease()), s.Err())
				w.closeSession(s)
			}
			var err error
			if s, err = w.openSession(stop); s == nil {
				return err // nil when stopped
			}
			if locker, err = w.locker(s); err != nil {
				return err
			}
		}
		mode := "x"
		switch {
		case w.cfg.workload == "semaphore":
			mode = "s"
		case w.cfg.workload == "rwmutex" && w.rng.IntN(3) != 0: // a writer with probability 1/3
			mode = "s"
		}
		via := w.via()
		g := w.acquire(mode, via)
		ctx, cancel := context.WithTimeout(stop, 4*w.cfg.ttl)
		h, err := locker(mode, via)(ctx)
		granted := history.Now() // right after Lock returns
		cancel()
		if err != nil {
			if w.failed(g, err) {
				return err
			}
			sleep(stop, w.between(100*time.Millisecond, 300*time.Millisecond))
			continue
		}
		lease := int64(s.Lease())
		hold := w.holdTime()
		if w.cfg.plant == plantHoldForever && w.grants == 0 {
			hold = -1
		}
		use := w.use
		if w.pay != nil {
			use = w.pay.use
		}
		lost, noticed := use(stop, g, h, mode, via, lease, granted, hold)
		if lost {
			dl, ok := w.ends.deadline(lease, h.Err())
			w.lost(g, h, noticed, dl, ok)
			if all, ok := h.(*heldAll); ok {
				all.drop() // the grant of the other name may live on: free it
			}
			continue
		}
		w.releasing(g)
		uctx, ucancel := context.WithTimeout(context.Background(), 2*w.cfg.ttl)
		err = h.Unlock(uctx)
		ucancel()
		w.emit(history.Event{G: g, Kind: history.Released, T: history.Now(), Err: errString(err)})
		if err != nil {
			log.Printf("g%d: unlock: %v", g, err)
		}
	}
	return nil
}

// acquireFunc takes a lock, as Lock does.
type acquireFunc func(context.Context) (held, error)

// held is what the worker uses of a grant it releases.
type held interface {
	grant
	Unlock(context.Context) error
}

// one adapts a Locker's acquire to an acquireFunc.
func one(f func(context.Context) (lock.Held, error)) acquireFunc {
	return func(ctx context.Context) (held, error) {
		h, err := f(ctx)
		if err != nil {
			return nil, err
		}
		return h, nil
	}
}

// locker returns the acquire of the workload's lock on s, by mode and by
// how (via: "", "try", "all").
func (w *worker) locker(s *session.Session) (func(mode, via string) acquireFunc, error) {
	wl := w.cfg.workload
	if history.IsPayments(wl) {
		wl = "mutex" // by Lock or TryLock (via() draws "all" for the mutex workload only)
	}
	switch wl {
	case "mutex":
		m, err := lock.New(s, w.cfg.lock)
		if err != nil {
			return nil, err
		}
		// The second name, taken with the first by LockAll only.
		m2, err := lock.New(s, w.cfg.lock+"-all")
		if err != nil {
			return nil, err
		}
		return func(_, via string) acquireFunc {
			switch via {
			case "try":
				return one(m.TryLock)
			case "all":
				return func(ctx context.Context) (held, error) {
					hs, err := lock.LockAll(ctx, m2, m) // the order LockAll takes them in is its own
					if err != nil {
						return nil, err
					}
					return newHeldAll(hs[1], hs[0]), nil
				}
			}
			return one(m.Lock)
		}, nil
	case "semaphore":
		sem, err := lock.NewSemaphore(s, w.cfg.lock, w.cfg.permits)
		if err != nil {
			return nil, err
		}
		return func(_, via string) acquireFunc {
			if via == "try" {
				return one(sem.TryAcquire)
			}
			return one(sem.Acquire)
		}, nil
	default: // rwmutex
		rw, err := lock.NewRWMutex(s, w.cfg.lock)
		if err != nil {
			return nil, err
		}
		return func(mode, via string) acquireFunc {
			switch {
			case mode == "x" && via == "try":
				return one(rw.TryLock)
			case mode == "x":
				return one(rw.Lock)
			case via == "try":
				return one(rw.TryRLock)
			}
			return one(rw.RLock)
		}, nil
	}
}

// heldAll is LockAll's pair of grants as one: the first's token (the
// workload's lock, whose register the worker writes), Done when either
// grant's Done closes, and an Unlock of both.
type heldAll struct {
	first, other lock.Held
	done         chan struct{}
	stop         chan struct{}
	exited       chan struct{}
}

func newHeldAll(first, other lock.Held) *heldAll {
	a := &heldAll{first: first, other: other, done: make(chan struct{}), stop: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(a.exited)
		select {
		case <-first.Done():
		case <-other.Done():
		case <-a.stop:
			return
		}
		close(a.done)
	}()
	return a
}

func (a *heldAll) Token() fence.Token    { return a.first.Token() }
func (a *heldAll) Done() <-chan struct{} { return a.done }

// Err is the first grant's error, else the other's.
func (a *heldAll) Err() error {
	if err := a.first.Err(); err != nil {
		return err
	}
	return a.other.Err()
}

// Unlock releases both grants and stops the Done watcher.
func (a *heldAll) Unlock(ctx context.Context) error {
	close(a.stop)
	<-a.exited
	return errors.Join(a.first.Unlock(ctx), a.other.Unlock(ctx))
}

// drop releases a lost pair (errors ignored: one of them is gone).
func (a *heldAll) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = a.Unlock(ctx)
}

// openSession opens a session, retrying every 200ms until stop ends (then
// it returns nil, nil).
func (w *worker) openSession(stop context.Context) (*session.Session, error) {
	s, err := retryOpen(stop, "session", func() (*session.Session, error) {
		ctx, cancel := context.WithTimeout(stop, 2*w.cfg.ttl)
		defer cancel()
		return session.New(ctx, w.cli, session.WithTTL(w.cfg.ttl))
	}, session.ErrInvalidOption)
	if s != nil {
		log.Printf("session %x opened", int64(s.Lease()))
	}
	return s, err
}

// retryOpen calls open every 200ms until it succeeds, fails with an error
// matching fatal (no retry can help), or stop ends (then it returns the
// zero T and nil).
func retryOpen[T any](stop context.Context, what string, open func() (T, error), fatal error) (T, error) {
	var zero T
	for {
		v, err := open()
		switch {
		case err == nil:
			return v, nil
		case errors.Is(err, fatal):
			return zero, err
		case stop.Err() != nil:
			return zero, nil
		}
		log.Printf("open %s: %v", what, err)
		if !sleep(stop, 200*time.Millisecond) {
			return zero, nil
		}
	}
}

// closeSession revokes s's lease (ctx 2×TTL).
func (w *worker) closeSession(s *session.Session) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*w.cfg.ttl)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		log.Printf("close session %x: %v", int64(s.Lease()), err)
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// use records grant g (granted: the stamp taken when the acquire
// returned), prints "PHASE use", and runs rounds of operations until hold
// elapses (never if hold < 0), stop ends, or the grant's Done closes. It
// reports whether Done was closed at the end, and when the worker noticed.
func (w *worker) use(stop context.Context, g int, h grant, mode, via string, lease, granted int64, hold time.Duration) (lost bool, noticed int64) {
	tok := h.Token().Seq
	w.grants++
	if w.grants == 1 {
		w.first = tok
	}
	if w.cfg.plant == plantFirstToken {
		// The plant models a lock service that hands out a stale token: the
		// grant's record and every operation carry the first token.
		tok = w.first
	}
	w.emit(history.Event{G: g, Kind: history.Grant, T: granted, Tok: tok, Mode: mode, Via: via, Lease: lease})
	w.phase("use", g)
	var elapsed <-chan time.Time // the hold's end, to wake the wait between rounds
	end := time.Now().Add(hold)
	if hold >= 0 {
		t := time.NewTimer(hold)
		defer t.Stop()
		elapsed = t.C
	}
	u := use{w: w, g: g, tok: tok, mode: mode, done: h.Done()}
	w.open = 0
	for {
		checked := history.Now() // before the check: Done was open at least until then
		if isClosed(u.done) {
			break
		}
		w.open = checked
		if stop.Err() != nil || hold >= 0 && !time.Now().Before(end) {
			break
		}
		u.round()
		between := time.NewTimer(w.between(10*time.Millisecond, 40*time.Millisecond))
		select {
		case <-u.done:
		case <-elapsed:
		case <-stop.Done():
		case <-between.C:
		}
		between.Stop()
	}
	if isClosed(u.done) {
		return true, history.Now()
	}
	return false, 0
}

// releasing records the end of grant g before its release: Event end
// How "unlock", then the phase line "release" (the end first: a worker
// paused at "release" has stopped acting).
func (w *worker) releasing(g int) {
	w.emit(history.Event{G: g, Kind: history.End, T: history.Now(), How: "unlock", Open: w.open})
	w.phase("release", g)
}

// lost records the end of grant g, lost: Event end How "done", T when the
// worker noticed, with the session's deadline when that ended it.
func (w *worker) lost(g int, h grant, noticed, deadline int64, reported bool) {
	err := h.Err()
	if !reported {
		log.Printf("g%d: lost with its session, but the session-end hook reported no end", g)
	}
	w.emit(history.Event{G: g, Kind: history.End, T: noticed, How: "done", Err: errString(err), Deadline: deadline, Open: w.open})
	log.Printf("g%d: lost: %v", g, err)
}

// errCampaignTimeout ends a campaign not elected within 4×TTL.
var errCampaignTimeout = errors.New("worker: not elected within 4×TTL")

// errEnough ends election.Run when the worker wants no more grants.
var errEnough = errors.New("worker: no more grants")

// runElection is the election workload's loop. Each election.Run (with
// Recampaign) is one or more grants: OnElected uses the term for 1–4
// holds and returns nil, after which Run resigns and returns. When a
// term is lost instead, Run campaigns again by itself: OnElected then
// records the next acquire before returning, and Run's next OnElected is
// that grant. An acquire not elected within 4×TTL fails (Run's ctx is
// cancelled).
func (w *worker) runElection(stop context.Context) error {
	for w.more(stop) {
		g := w.acquire("x", "")
		ctx, cancel := context.WithCancelCause(stop)
		timer := time.AfterFunc(4*w.cfg.ttl, func() { cancel(errCampaignTimeout) })
		open, released := true, false // an acquire without outcome; a grant awaiting its release
		gone := ""                    // what the check before the resign found: the term's key already gone
		err := election.Run(ctx, election.Config{
			Client:         w.cli,
			Name:           w.cfg.lock,
			Value:          fmt.Sprintf("w%d", w.cfg.id),
			SessionOptions: []session.Option{session.WithTTL(w.cfg.ttl)},
			Recampaign:     true,
			RetryPeriod:    200 * time.Millisecond,
			OnElected: func(lctx context.Context, t *election.Term) error {
				if released {
					// The last OnElected returned nil after its term was
					// lost (Run resigns only a term it still leads), so
					// Run campaigned again: that grant is released, this
					// is a new one.
					w.emit(history.Event{G: g, Kind: history.Released, T: history.Now(), Err: gone})
					g = w.acquire("x", "")
					released, gone = false, ""
				}
				granted := history.Now()
				timer.Stop()
				open = false
				hold := time.Duration(0)
				for range 1 + w.rng.IntN(4) {
					hold += w.holdTime()
				}
				if w.cfg.plant == plantHoldForever && w.grants == 0 {
					hold = -1
				}
				// lctx ends when the term's Done closes (after it) or
				// when ctx does (SIGTERM): the hold's stop.
				lost, noticed := w.use(lctx, g, t, "x", "", w.termLease(t), granted, hold)
				if !lost {
					w.releasing(g)
					gone = w.termGone(t)
					released = true
					return nil // Run resigns
				}
				dl, ok := w.ends.lastDeadline(t.Err())
				w.lost(g, t, noticed, dl, ok)
				if !w.more(stop) {
					cancel(errEnough)
					return nil
				}
				g = w.acquire("x", "") // Run campaigns again after RetryPeriod
				open = true
				timer = time.AfterFunc(4*w.cfg.ttl, func() { cancel(errCampaignTimeout) })
				return nil
			},
		})
		timer.Stop()
		cause := context.Cause(ctx)
		cancel(nil)
		switch {
		case released:
			// Run resigned (under its own cleanup bound, 5s, not the
			// 2×TTL of Unlock) and closed the session; it does not report
			// the resign's error, so Err is empty.
			w.emit(history.Event{G: g, Kind: history.Released, T: history.Now(), Err: gone})
		case open:
			if err == nil {
				err = errors.New("election ended without a term")
			} else if cause != nil && !errors.Is(err, cause) {
				err = fmt.Errorf("%w (%w)", err, cause)
			}
			if w.failed(g, err) {
				return err
			}
			sleep(stop, w.between(100*time.Millisecond, 300*time.Millisecond))
		}
	}
	return nil
}

// termGone tells, before Run resigns, whether the term was taken by the
// server while it was used (Run does not report its resign's error, which
// would): the term's Err, or its key missing from a linearizable read; ""
// if neither. A read that fails is tried again for up to 5 s (under load
// one failed at once, and the checker had no evidence for a grant etcd's
// stale-leader revoke had taken); "" if none answers.
func (w *worker) termGone(t *election.Term) string {
	if err := t.Err(); err != nil {
		return err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		held, err := keyCreatedAt(ctx, w.cli, election.DefaultPrefix+"/"+w.cfg.lock+"/", int64(t.Epoch()))
		switch {
		case err == nil && !held:
			return "election: key deleted before the resign (the worker's read at release)"
		case err == nil:
			return ""
		}
		log.Printf("the read before the resign: %v", err)
		if !sleep(ctx, 100*time.Millisecond) {
			return ""
		}
	}
}

// keyCreatedAt tells whether a key under prefix created at revision rev
// still exists (a linearizable read). Not a count: etcd's Count is taken
// before the revision filters, so a count-only read with them counts every
// key under the prefix (the first version of termGone did, and found a
// term gone only when no candidate at all was left).
func keyCreatedAt(ctx context.Context, kv clientv3.KV, prefix string, rev int64) (bool, error) {
	resp, err := kv.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithMinCreateRev(rev), clientv3.WithMaxCreateRev(rev))
	if err != nil {
		return false, err
	}
	return len(resp.Kvs) > 0, nil
}

// termLease returns the lease of the term's key, for the checker's
// evidence (a Term does not show its session): a serializable read of the
// election's keys at the term's epoch, on the worker's own member; 0 if it
// fails within a second.
func (w *worker) termLease(t *election.Term) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rev := int64(t.Epoch())
	resp, err := w.cli.Get(ctx, election.DefaultPrefix+"/"+w.cfg.lock+"/", clientv3.WithPrefix(), clientv3.WithSerializable(),
		clientv3.WithRev(rev), clientv3.WithMinCreateRev(rev), clientv3.WithMaxCreateRev(rev))
	if err == nil && len(resp.Kvs) != 1 {
		err = fmt.Errorf("%d keys created at revision %d", len(resp.Kvs), rev)
	}
	if err != nil {
		log.Printf("the term's lease: %v", err)
		return 0
	}
	return resp.Kvs[0].Lease
}
