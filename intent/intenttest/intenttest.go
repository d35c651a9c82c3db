// Package intenttest is the conformance suite of package intent's Stores:
// Run checks, through a Journal on the Store, every promise of intent.Store
// and intent.Journal that does not depend on the lock backend. The Stores
// in this repository (intent.Memory, intent.Etcd, contrib/pgfence's
// journal) pass it; a Store of your own should too.
package intenttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/intent"
	"github.com/dlock-go/dlock/lock"
)

// Backend describes the Store under test.
type Backend struct {
	// New returns the Store for one test. It may return one Store for
	// every test: each test uses lock names of its own.
	New func(t *testing.T) intent.Store
	// Timeout bounds each test; 0 means 30s.
	Timeout time.Duration
}

// Run runs the suite as subtests of t.
func Run(t *testing.T, b Backend) {
	if b.Timeout == 0 {
		b.Timeout = 30 * time.Second
	}
	s := &suite{b: b}
	for _, c := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"DoOnce", s.doOnce},
		{"KeyShape", s.keyShape},
		{"OpenIntentKeepsItsKey", s.openKeepsKey},
		{"SupersededByPending", s.supersededByPending},
		{"SupersededByDo", s.supersededByDo},
		{"SupersededDuringCall", s.supersededDuringCall},
		{"FailureRecorded", s.failureRecorded},
		{"PendingOrder", s.pendingOrder},
		{"EndedGrant", s.endedGrant},
		{"BadInput", s.badInput},
		{"CancelledContext", s.cancelled},
		{"Compaction", s.compaction},
		{"RaceWithLaterHolder", s.race},
		{"Mark", s.mark},
		{"FirstOutcomeKept", s.firstOutcomeKept},
		{"EndedAndSuperseded", s.endedAndSuperseded},
	} {
		t.Run(c.name, c.f)
	}
}

type suite struct{ b Backend }

// Held is a grant for the suite: a token, and a Done the test closes.
type Held struct {
	tok  fence.Token
	done chan struct{}
	once sync.Once
}

// NewHeld returns a grant of lock name with token seq, whose Done stays
// open until End.
func NewHeld(name string, seq uint64) *Held {
	return &Held{tok: fence.Token{Name: name, Seq: seq}, done: make(chan struct{})}
}

func (h *Held) Token() fence.Token    { return h.tok }
func (h *Held) Done() <-chan struct{} { return h.done }

// End closes Done, as a grant's local deadline would.
func (h *Held) End() { h.once.Do(func() { close(h.done) }) }

func (h *Held) Err() error {
	select {
	case <-h.done:
		return fmt.Errorf("%w: intenttest.Held ended", lock.ErrLockLost)
	default:
		return nil
	}
}

func (h *Held) Unlock(context.Context) error { h.End(); return nil }

var _ lock.Held = (*Held)(nil)

// setup returns a Journal on a Store, a lock name of the test's own, and
// a ctx bounded by the suite's timeout.
func (s *suite) setup(t *testing.T) (*intent.Journal, intent.Store, string, context.Context) {
	t.Helper()
	st := s.b.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), s.b.Timeout)
	t.Cleanup(cancel)
	slug := strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '-'
	}, t.Name())
	return intent.New(st), st, fmt.Sprintf("intenttest/%s-%d", slug, rand.Uint32()), ctx
}

// calls counts fn's calls and keeps the keys it was given.
type calls struct {
	mu   sync.Mutex
	keys []string
	ctx  []string // the key KeyFromContext found
}

func (c *calls) fn(err error) func(context.Context, string) error {
	return func(ctx context.Context, key string) error {
		k, _ := intent.KeyFromContext(ctx)
		c.mu.Lock()
		c.keys = append(c.keys, key)
		c.ctx = append(c.ctx, k)
		c.mu.Unlock()
		return err
	}
}

func (c *calls) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.keys)
}

var errCall = errors.New("intenttest: the call's outcome is unknown")

func (s *suite) doOnce(t *testing.T) {
	j, _, name, ctx := s.setup(t)
	h := NewHeld(name, 7)
	var c calls
	if err := j.Do(ctx, h, "charge/order-42", c.fn(nil)); err != nil {
		t.Fatalf("Do: %v", err)
	}
	want := intent.Key(name, "charge/order-42", 7)
	if c.n() != 1 || c.keys[0] != want || c.ctx[0] != want {
		t.Fatalf("fn got keys %q (ctx %q), want once %q", c.keys, c.ctx, want)
	}
	if err := j.Do(ctx, h, "charge/order-42", c.fn(nil)); err != nil {
		t.Fatalf("second Do: %v", err)
	}
	later := NewHeld(name, 8)
	if err := j.Do(ctx, later, "charge/order-42", c.fn(nil)); err != nil {
		t.Fatalf("Do by a later holder: %v", err)
	}
	if c.n() != 1 {
		t.Fatalf("fn called %d times for a recorded operation, want 1", c.n())
	}
	if p, err := j.Pending(ctx, later); err != nil || len(p) != 0 {
		t.Fatalf("Pending after a finished operation = %v, %v; want none", p, err)
	}
}

func (s *suite) keyShape(t *testing.T) {
	j, _, name, ctx := s.setup(t)
	h := NewHeld(name, 1<<40+3)
	ops := []string{"charge/order-42", "über 💳 \"quoted\"\r\n\\", strings.Repeat("x", intent.MaxOpLen), "a", "%41"}
	seen := map[string]string{}
	for _, op := range ops {
		var c calls
		if err := j.Do(ctx, h, op, c.fn(nil)); err != nil {
			t.Fatalf("Do(%q): %v", op, err)
		}
		k := c.keys[0]
		if len(k) == 0 || len(k) > 255 {
			t.Errorf("op %q: key %q has %d bytes, want 1 to 255", op, k, len(k))
		}
		for i := 0; i < len(k); i++ {
			// Printable ASCII, and nothing that needs quoting in an HTTP
			// header or a structured-field string: no space, '"', '\\'.
			if k[i] <= ' ' || k[i] > '~' || k[i] == '"' || k[i] == '\\' || k[i] == ',' || k[i] == ';' {
				t.Errorf("op %q: key %q has byte %q", op, k, k[i])
			}
		}
		if o, dup := seen[k]; dup {
			t.Errorf("ops %q and %q share the key %q", o, op, k)
		}
		seen[k] = op
	}
}

func (s *suite) openKeepsKey(t *testing.T) {
	j, _, name, ctx := s.setup(t)
	a, b := NewHeld(name, 10), NewHeld(name, 20)
	var c calls
	if err := j.Do(ctx, a, "send/mail-1", c.fn(errCall)); !errors.Is(err, errCall) {
		t.Fatalf("Do with a failing call = %v, want fn's error", err)
	}
	// The same holder again: the open intent's key.
	if err := j.Do(ctx, a, "send/mail-1", c.fn(errCall)); !errors.Is(err, errCall) {
		t.Fatalf("second Do = %v", err)
	}
	p, err := j.Pending(ctx, b)
	if err != nil {
		t.Fatalf("Pending: %v", err)
	}
	if len(p) != 1 || p[0].Op != "send/mail-1" || p[0].Key != c.keys[0] || p[0].Token != a.Token() {
		t.Fatalf("Pending = %+v, want send/mail-1 with key %q and token %v", p, c.keys[0], a.Token())
	}
	if err := j.Do(ctx, b, p[0].Op, c.fn(nil)); err != nil {
		t.Fatalf("finishing the pending intent: %v", err)
	}
	if c.n() != 3 || c.keys[1] != c.keys[0] || c.keys[2] != c.keys[0] {
		t.Fatalf("keys given to fn: %q, want one key three times", c.keys)
	}
	if p, err := j.Pending(ctx, NewHeld(name, 30)); err != nil || len(p) != 0 {
		t.Fatalf("Pending after finishing = %v, %v; want none", p, err)
	}
}

// superseded checks that err is the journal's refusal of a stale holder.
func superseded(t *testing.T, what string, err error, seq, highest uint64) {
	t.Helper()
	var st *fence.StaleTokenError
	switch {
	case !errors.Is(err, intent.ErrSuperseded) || !errors.Is(err, fence.ErrStaleToken):
		t.Fatalf("%s = %v, want an error matching intent.ErrSuperseded and fence.ErrStaleToken", what, err)
	case !errors.As(err, &st) || st.Seq != seq || st.Highest != highest:
		t.Fatalf("%s = %v, want a *fence.StaleTokenError with seq %d below %d", what, err, seq, highest)
	}
}

func (s *suite) supersededByPending(t *testing.T) {
	j, _, name, ctx := s.setup(t)
	a, b := NewHeld(name, 10), NewHeld(name, 20)
	var c calls
	if err := j.Do(ctx, a, "op-1", c.fn(nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Pending(ctx, b); err != nil {
		t.Fatal(err)
	}
	superseded(t, "Do by the earlier holder after Pending", j.Do(ctx, a, "op-2", c.fn(errCall)), 10, 20)
	_, err := j.Pending(ctx, a)
	superseded(t, "Pending by the earlier holder", err, 10, 20)
	noStaleIntent(t, j, ctx, name, "op-2")
	if c.n() != 1 {
		t.Fatalf("fn called %d times, want 1 (the stale holder's must not run)", c.n())
	}
	if !errors.Is(intent.ErrSuperseded, fence.ErrStaleToken) {
		t.Fatal("intent.ErrSuperseded does not match fence.ErrStaleToken")
	}
}

// noStaleIntent checks that a refused holder's intent for op was not
// written: a later holder's Pending does not list it.
func noStaleIntent(t *testing.T, j *intent.Journal, ctx context.Context, name, op string) {
	t.Helper()
	p, err := j.Pending(ctx, NewHeld(name, 1000))
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(ops(p), op) {
		t.Fatalf("the refused holder's intent for %s was written: a later Pending lists %q", op, ops(p))
	}
}

func (s *suite) supersededByDo(t *testing.T) {
	j, _, name, ctx := s.setup(t)
	a, b := NewHeld(name, 10), NewHeld(name, 20)
	var c calls
	if err := j.Do(ctx, b, "op-b", c.fn(nil)); err != nil {
		t.Fatal(err)
	}
	superseded(t, "Do by the earlier holder after a later holder's Do", j.Do(ctx, a, "op-a", c.fn(errCall)), 10, 20)
	superseded(t, "Do of the later holder's op by the earlier holder", j.Do(ctx, a, "op-b", c.fn(nil)), 10, 20)
	noStaleIntent(t, j, ctx, name, "op-a")
	if c.n() != 1 {
		t.Fatalf("fn called %d times, want 1", c.n())
	}
}

func (s *suite) supersededDuringCall(t *testing.T) {
	j, _, name, ctx := s.setup(t)
	a, b := NewHeld(name, 10), NewHeld(name, 20)
	var pending []intent.Intent
	var key string
	err := j.Do(ctx, a, "charge/order-7", func(ctx context.Context, k string) error {
		key = k
		// A later holder takes over while the call is under way.
		var err error
		pending, err = j.Pending(ctx, b)
		return err
	})
	superseded(t, "Do whose grant was superseded during the call", err, 10, 20)
	if len(pending) != 1 || pending[0].Key != key {
		t.Fatalf("the later holder's Pending = %+v, want the call's intent with key %q", pending, key)
	}
	var c calls
	if err := j.Do(ctx, b, "charge/order-7", c.fn(nil)); err != nil || c.n() != 1 || c.keys[0] != key {
		t.Fatalf("finishing it: %v, keys %q; want the key %q", err, c.keys, key)
	}
}

func (s *suite) failureRecorded(t *testing.T) {
	j, _, name, ctx := s.setup(t)
	a := NewHeld(name, 10)
	declined := errors.New("card declined")
	var c calls
	err := j.Do(ctx, a, "charge/order-9", c.fn(intent.Failed(declined)))
	if !errors.Is(err, intent.ErrFailed) || !errors.Is(err, declined) {
		t.Fatalf("Do with a final failure = %v, want ErrFailed and the cause", err)
	}
	for _, h := range []*Held{a, NewHeld(name, 11)} {
		err := j.Do(ctx, h, "charge/order-9", c.fn(nil))
		var f *intent.FailedError
		if !errors.Is(err, intent.ErrFailed) || !errors.As(err, &f) || f.Msg != "card declined" {
			t.Fatalf("Do of a failed operation = %v, want its recorded failure", err)
		}
	}
	if c.n() != 1 {
		t.Fatalf("fn called %d times, want 1", c.n())
	}
	if p, err := j.Pending(ctx, NewHeld(name, 12)); err != nil || len(p) != 0 {
		t.Fatalf("Pending = %v, %v; a failed operation is not open", p, err)
	}
}

func (s *suite) pendingOrder(t *testing.T) {
	j, _, name, ctx := s.setup(t)
	h1, h2, h3 := NewHeld(name, 5), NewHeld(name, 6), NewHeld(name, 7)
	var c calls
	for _, op := range []string{"c", "a", "b"} {
		if err := j.Do(ctx, h1, op, c.fn(errCall)); !errors.Is(err, errCall) {
			t.Fatal(err)
		}
	}
	if err := j.Do(ctx, h1, "done", c.fn(nil)); err != nil {
		t.Fatal(err)
	}
	p, err := j.Pending(ctx, h2)
	if err != nil {
		t.Fatal(err)
	}
	if got := ops(p); !slices.Equal(got, []string{"c", "a", "b"}) {
		t.Fatalf("Pending = %q, want the open intents oldest first: c a b", got)
	}
	if err := j.Do(ctx, h2, "d", c.fn(errCall)); !errors.Is(err, errCall) {
		t.Fatal(err)
	}
	if p, err = j.Pending(ctx, h2); err != nil || !slices.Equal(ops(p), []string{"c", "a", "b"}) {
		t.Fatalf("Pending by h2 = %q, %v; want only earlier holders' intents", ops(p), err)
	}
	if p, err = j.Pending(ctx, h3); err != nil || !slices.Equal(ops(p), []string{"c", "a", "b", "d"}) {
		t.Fatalf("Pending by h3 = %q, %v; want c a b d", ops(p), err)
	}
}

func ops(p []intent.Intent) []string {
	var out []string
	for _, i := range p {
		out = append(out, i.Op)
	}
	return out
}

func (s *suite) endedGrant(t *testing.T) {
	j, _, name, ctx := s.setup(t)
	h := NewHeld(name, 3)
	h.End()
	var c calls
	if err := j.Do(ctx, h, "op", c.fn(nil)); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("Do on an ended grant = %v, want its Err (lock.ErrLockLost)", err)
	}
	if _, err := j.Pending(ctx, h); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("Pending on an ended grant = %v, want lock.ErrLockLost", err)
	}
}

func (s *suite) badInput(t *testing.T) {
	j, _, name, ctx := s.setup(t)
	h := NewHeld(name, 3)
	var c calls
	for _, op := range []string{"", strings.Repeat("y", intent.MaxOpLen+1)} {
		if err := j.Do(ctx, h, op, c.fn(nil)); !errors.Is(err, intent.ErrInvalidOp) {
			t.Errorf("Do with a %d-byte op = %v, want ErrInvalidOp", len(op), err)
		}
	}
	if err := j.Do(ctx, NewHeld(name, 0), "op", c.fn(nil)); !errors.Is(err, fence.ErrNoToken) {
		t.Errorf("Do with Seq 0 = %v, want fence.ErrNoToken", err)
	}
	if err := j.Do(ctx, nil, "op", c.fn(nil)); err == nil {
		t.Error("Do with a nil Held succeeded")
	}
	if err := j.Do(ctx, h, "op", nil); err == nil {
		t.Error("Do with a nil fn succeeded")
	}
	if c.n() != 0 {
		t.Fatalf("fn called %d times on bad input", c.n())
	}
}

func (s *suite) cancelled(t *testing.T) {
	j, _, name, ctx := s.setup(t)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	var c calls
	if err := j.Do(cctx, NewHeld(name, 3), "op", c.fn(nil)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Do with a cancelled ctx = %v, want context.Canceled", err)
	}
	if _, err := j.Pending(cctx, NewHeld(name, 3)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Pending with a cancelled ctx = %v, want context.Canceled", err)
	}
	// fn that outlives its ctx: the outcome is still recorded.
	dctx, dcancel := context.WithCancel(ctx)
	err := j.Do(dctx, NewHeld(name, 4), "late", func(context.Context, string) error { dcancel(); return nil })
	if err != nil {
		t.Fatalf("Do whose ctx ended after fn succeeded = %v, want nil", err)
	}
	if p, err := j.Pending(ctx, NewHeld(name, 5)); err != nil || len(p) != 0 {
		t.Fatalf("Pending = %+v, %v; want the late outcome recorded", p, err)
	}
	if c.n() != 0 {
		t.Fatalf("fn called %d times with a cancelled ctx", c.n())
	}
}

func (s *suite) compaction(t *testing.T) {
	j, st, name, ctx := s.setup(t)
	h := NewHeld(name, 3)
	var c calls
	for i := range 5 {
		if err := j.Do(ctx, h, fmt.Sprintf("done-%d", i), c.fn(nil)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Do(ctx, h, "open", c.fn(errCall)); !errors.Is(err, errCall) {
		t.Fatal(err)
	}
	// The default retention keeps what just finished.
	if _, err := j.Compact(ctx); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	if err := j.Do(ctx, h, "done-0", c.fn(nil)); err != nil || c.n() != 6 {
		t.Fatalf("Do of an op finished within the retention: %v, fn calls %d; want its outcome, no call", err, c.n())
	}
	// Past it (the clock moved on): finished records go, a batch at a
	// time (the store may hold other tests' records too).
	if n, err := st.Compact(ctx, time.Now().Add(time.Hour), 2); err != nil || n != 2 {
		t.Fatalf("Compact(limit 2) = %d, %v; want 2", n, err)
	}
	for {
		n, err := st.Compact(ctx, time.Now().Add(time.Hour), 100)
		if err != nil {
			t.Fatalf("Compact: %v", err)
		}
		if n == 0 {
			break
		}
	}
	p, err := j.Pending(ctx, NewHeld(name, 4))
	if err != nil || !slices.Equal(ops(p), []string{"open"}) {
		t.Fatalf("Pending after compaction = %q, %v; an open intent is never dropped", ops(p), err)
	}
	// A compacted operation is new again (its key too: a later token).
	later := NewHeld(name, 5)
	for i := range 5 {
		if err := j.Do(ctx, later, fmt.Sprintf("done-%d", i), c.fn(nil)); err != nil {
			t.Fatal(err)
		}
	}
	if c.n() != 11 || c.keys[10] != intent.Key(name, "done-4", 5) {
		t.Fatalf("fn calls %d (last key %q); want the 5 compacted ops run again under token 5", c.n(), c.keys[len(c.keys)-1])
	}
}

func (s *suite) mark(t *testing.T) {
	j, st, name, ctx := s.setup(t)
	if m, err := st.Mark(ctx, name); err != nil || m != 0 {
		t.Fatalf("Mark of an unused journal = %d, %v; want 0", m, err)
	}
	var c calls
	if err := j.Do(ctx, NewHeld(name, 12), "op", c.fn(nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Pending(ctx, NewHeld(name, 30)); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Mark(ctx, name); err != nil || m != 30 {
		t.Fatalf("Mark = %d, %v; want 30, the highest Seq that wrote", m, err)
	}
}

func (s *suite) firstOutcomeKept(t *testing.T) {
	j, st, name, ctx := s.setup(t)
	h := NewHeld(name, 3)
	fresh := intent.Intent{Op: "op", Key: intent.Key(name, "op", 3), Token: h.Token()}
	if _, err := st.Begin(ctx, h, fresh); err != nil {
		t.Fatal(err)
	}
	if err := st.Finish(ctx, h, "op", "first"); err != nil {
		t.Fatal(err)
	}
	if err := st.Finish(ctx, h, "op", ""); err != nil {
		t.Fatal(err)
	}
	rec, err := st.Begin(ctx, h, fresh)
	if err != nil || !rec.Done || rec.Failure != "first" {
		t.Fatalf("the record after two Finishes = %+v, %v; want the first outcome", rec, err)
	}
	var c calls
	var f *intent.FailedError
	if err := j.Do(ctx, h, "op", c.fn(nil)); !errors.As(err, &f) || f.Msg != "first" || c.n() != 0 {
		t.Fatalf("Do = %v (fn calls %d); want the first outcome, no call", err, c.n())
	}
}

func (s *suite) endedAndSuperseded(t *testing.T) {
	j, _, name, ctx := s.setup(t)
	a := NewHeld(name, 10)
	if _, err := j.Pending(ctx, NewHeld(name, 20)); err != nil {
		t.Fatal(err)
	}
	a.End()
	var c calls
	err := j.Do(ctx, a, "op", c.fn(nil))
	superseded(t, "Do by an ended and superseded grant", err, 10, 20)
	if !errors.Is(err, lock.ErrLockLost) || c.n() != 0 {
		t.Fatalf("Do = %v (fn calls %d); want lock.ErrLockLost too, and no call", err, c.n())
	}
}

// race runs an earlier holder's Do loop against a later holder's Pending,
// 20 rounds: every call the earlier holder starts after Pending returned
// must be one of the intents Pending returned (written before the mark
// moved).
func (s *suite) race(t *testing.T) {
	for round := range 20 {
		s.raceOnce(t, round)
		if t.Failed() {
			return
		}
	}
}

func (s *suite) raceOnce(t *testing.T, round int) {
	j, _, name, ctx := s.setup(t)
	ctx, cancel := context.WithCancel(ctx)
	a, b := NewHeld(name, 10), NewHeld(name, 20)
	var after atomic.Bool
	var mu sync.Mutex
	var late []string // ops whose call started after Pending returned
	done := make(chan error, 1)
	three := make(chan struct{})
	defer func() { cancel(); <-done }()
	go func() {
		lateTries := 0
		for i := 0; ; i++ {
			if i == 3 {
				close(three)
			}
			op := fmt.Sprintf("op-%d", i)
			err := j.Do(ctx, a, op, func(context.Context, string) error {
				if after.Load() {
					mu.Lock()
					late = append(late, op)
					mu.Unlock()
				}
				return errCall // leave it open
			})
			if errors.Is(err, intent.ErrSuperseded) {
				done <- nil
				return
			}
			if after.Load() {
				if lateTries++; lateTries > 100 {
					done <- fmt.Errorf("%d operations started after the later holder's Pending, none refused", lateTries)
					return
				}
			}
			if !errors.Is(err, errCall) {
				done <- err
				return
			}
		}
	}()
	// Let a few intents land first.
	select {
	case <-three:
	case err := <-done:
		done <- err
		t.Errorf("round %d: the earlier holder's loop ended early: %v", round, err)
		return
	}
	p, err := j.Pending(ctx, b)
	after.Store(true)
	if err != nil {
		t.Errorf("round %d: Pending: %v", round, err)
		return
	}
	err = <-done
	done <- nil
	if err != nil {
		t.Errorf("round %d: the earlier holder's loop: %v", round, err)
		return
	}
	open := map[string]bool{}
	for _, i := range p {
		open[i.Op] = true
	}
	mu.Lock()
	defer mu.Unlock()
	for _, op := range late {
		if !open[op] {
			t.Errorf("round %d: the earlier holder started %s after the later holder's Pending, and Pending did not list it", round, op)
		}
	}
}
