package fencetest

import (
	"context"
	"errors"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/testsuite"
)

// DefaultTimeout bounds every wait of the suite when Config.Timeout is zero.
const DefaultTimeout = testsuite.DefaultTimeout

// BadToken is a token that every guard must reject before touching its
// storage, with the error it must match.
type BadToken struct {
	Token fence.Token
	Want  error // fence.ErrNoToken or fence.ErrInvalidToken
}

// BadTokens are the tokens every guard must reject. A backend's test can
// present them to its other entry points (a guarded write, a transaction).
var BadTokens = []BadToken{
	{fence.Token{Name: "fencetest/orders", Seq: 0}, fence.ErrNoToken},
	{fence.Token{}, fence.ErrNoToken},
	{fence.Token{Name: "", Seq: 7}, fence.ErrInvalidToken},
}

// Config describes the Guard implementation under test.
type Config struct {
	// New returns a fresh, empty guard: its own namespace (table, key
	// prefix), so that no subtest sees another's marks. It fails t on
	// error. Required.
	New func(t *testing.T) fence.Guard

	// Highest reads the stored high-water mark for name from g's storage,
	// or 0 if none, failing t on error. It is called on t's goroutine, also
	// while the concurrency test's workers run. Optional: when nil, the
	// suite checks the marks through Admit alone and the concurrency test
	// runs without its monitor.
	Highest func(t *testing.T, g fence.Guard, name string) uint64

	// Timeout bounds the suite's waits: every Admit, and all of the
	// concurrency test's. Optional, defaults to DefaultTimeout.
	Timeout time.Duration
}

// Run runs the conformance suite against c, as subtests of t. Each subtest
// calls c.New for a guard of its own.
func Run(t *testing.T, c Config) {
	t.Helper()
	require.NotNil(t, c.New, "Config.New is required")
	s := &suite{c: c, timeout: testsuite.Timeout(c.Timeout)}
	t.Run("AdmitFirst", s.admitFirst)
	t.Run("AdmitEqual", s.admitEqual)
	t.Run("RejectLower", s.rejectLower)
	t.Run("NamesIndependent", s.namesIndependent)
	t.Run("NoToken", func(t *testing.T) { s.rejectBad(t, fence.ErrNoToken) })
	t.Run("InvalidToken", func(t *testing.T) { s.rejectBad(t, fence.ErrInvalidToken) })
	t.Run("CancelledContext", s.cancelledContext)
	t.Run("Concurrent", s.concurrent)
	t.Run("LargeSeq", s.largeSeq)
	t.Run("NumericOrder", s.numericOrder)
}

type suite struct {
	c       Config
	timeout time.Duration
}

// Lock names, without digits, so that the numbers found in an error message
// are the token's and the mark's.
const (
	orders  = "fencetest/orders"
	billing = "fencetest/billing"
)

func (s *suite) ctx(t *testing.T) context.Context {
	return testsuite.Context(t, s.timeout)
}

// checkHighest checks the stored mark for name, if Config.Highest is set.
func (s *suite) checkHighest(t *testing.T, g fence.Guard, name string, want uint64, msgAndArgs ...any) {
	t.Helper()
	if s.c.Highest != nil {
		assert.Equal(t, want, s.c.Highest(t, g, name), msgAndArgs...)
	}
}

// checkStale checks that err rejects tok as stale, and if it is a
// *fence.StaleTokenError, that it carries tok and the mark highest, and that
// its message shows both numbers.
func checkStale(t *testing.T, err error, tok fence.Token, highest uint64) {
	t.Helper()
	if !assert.ErrorIs(t, err, fence.ErrStaleToken, "Admit(%v) after %d was admitted", tok, highest) {
		return
	}
	var se *fence.StaleTokenError
	if !errors.As(err, &se) {
		return
	}
	assert.Equal(t, fence.StaleTokenError{Name: tok.Name, Seq: tok.Seq, Highest: highest}, *se, "the StaleTokenError of Admit(%v)", tok)
	msg := err.Error()
	assert.Contains(t, msg, strconv.FormatUint(tok.Seq, 10), "the message names the rejected seq")
	assert.Contains(t, msg, strconv.FormatUint(highest, 10), "the message names the highest admitted seq")
}

// admitFirst: a fresh guard admits a first token and stores it.
func (s *suite) admitFirst(t *testing.T) {
	g := s.c.New(t)
	s.checkHighest(t, g, orders, 0, "the mark of a fresh guard")
	require.NoError(t, g.Admit(s.ctx(t), fence.Token{Name: orders, Seq: 5}), "a first token")
	s.checkHighest(t, g, orders, 5, "the mark after the first token")
}

// admitEqual: one holder may present its token many times.
func (s *suite) admitEqual(t *testing.T) {
	ctx := s.ctx(t)
	g := s.c.New(t)
	tok := fence.Token{Name: orders, Seq: 5}
	require.NoError(t, g.Admit(ctx, tok), "a first token")
	assert.NoError(t, g.Admit(ctx, tok), "an equal token again")
	assert.NoError(t, g.Admit(ctx, tok), "an equal token a third time")
	s.checkHighest(t, g, orders, 5)
}

// rejectLower: a lower token is stale, and its rejection lowers nothing.
func (s *suite) rejectLower(t *testing.T) {
	ctx := s.ctx(t)
	g := s.c.New(t)
	require.NoError(t, g.Admit(ctx, fence.Token{Name: orders, Seq: 42}), "a first token")
	low := fence.Token{Name: orders, Seq: 41}
	checkStale(t, g.Admit(ctx, low), low, 42)
	checkStale(t, g.Admit(ctx, low), low, 42) // the first rejection did not lower the mark to 41
	lower := fence.Token{Name: orders, Seq: 1}
	checkStale(t, g.Admit(ctx, lower), lower, 42)
	s.checkHighest(t, g, orders, 42, "the mark after rejections")
	assert.NoError(t, g.Admit(ctx, fence.Token{Name: orders, Seq: 42}), "the highest token after rejections")
	assert.NoError(t, g.Admit(ctx, fence.Token{Name: orders, Seq: 43}), "a higher token")
}

// namesIndependent: each name has its own mark, including a name that is a
// prefix of another.
func (s *suite) namesIndependent(t *testing.T) {
	ctx := s.ctx(t)
	g := s.c.New(t)
	sub := orders + "/eu"
	require.NoError(t, g.Admit(ctx, fence.Token{Name: orders, Seq: 10}))
	assert.NoError(t, g.Admit(ctx, fence.Token{Name: billing, Seq: 1}), "a low token of another name")
	assert.NoError(t, g.Admit(ctx, fence.Token{Name: sub, Seq: 2}), "a low token of a longer name")
	require.NoError(t, g.Admit(ctx, fence.Token{Name: billing, Seq: 20}))
	checkStale(t, g.Admit(ctx, fence.Token{Name: orders, Seq: 9}), fence.Token{Name: orders, Seq: 9}, 10)
	checkStale(t, g.Admit(ctx, fence.Token{Name: billing, Seq: 19}), fence.Token{Name: billing, Seq: 19}, 20)
	checkStale(t, g.Admit(ctx, fence.Token{Name: sub, Seq: 1}), fence.Token{Name: sub, Seq: 1}, 2)
	assert.NoError(t, g.Admit(ctx, fence.Token{Name: orders, Seq: 11}), "raising one name")
	for name, want := range map[string]uint64{orders: 11, billing: 20, sub: 2, "fencetest/never": 0} {
		s.checkHighest(t, g, name, want, "the mark of %q", name)
	}
}

// rejectBad: the BadTokens that must match want are rejected with it, and
// nothing is stored for their names.
func (s *suite) rejectBad(t *testing.T, want error) {
	ctx := s.ctx(t)
	g := s.c.New(t)
	for _, b := range BadTokens {
		if b.Want != want {
			continue
		}
		err := g.Admit(ctx, b.Token)
		assert.ErrorIs(t, err, want, "Admit(%#v)", b.Token)
		assert.NotErrorIs(t, err, fence.ErrStaleToken, "Admit(%#v)", b.Token)
		if b.Token.Name != "" {
			s.checkHighest(t, g, b.Token.Name, 0, "the mark after Admit(%#v)", b.Token)
		}
	}
}

// cancelledContext: Admit with an ended ctx fails with the ctx's error and
// admits nothing.
func (s *suite) cancelledContext(t *testing.T) {
	g := s.c.New(t)
	ctx, cancel := context.WithCancel(s.ctx(t))
	cancel()
	err := g.Admit(ctx, fence.Token{Name: orders, Seq: 5})
	assert.ErrorIs(t, err, context.Canceled, "Admit with a cancelled ctx")
	assert.NotErrorIs(t, err, fence.ErrStaleToken, "Admit with a cancelled ctx")
	s.checkHighest(t, g, orders, 0, "the mark after Admit with a cancelled ctx")
	assert.NoError(t, g.Admit(s.ctx(t), fence.Token{Name: orders, Seq: 1}),
		"a lower token after Admit with a cancelled ctx: the cancelled Admit was admitted")
}

// concurrent: Workers goroutines admit interleaved tokens of one name (see
// Interleave). No token is admitted once a higher one has been admitted
// (checked against every admission that completed before the call began),
// every rejection names a higher mark, and the highest token wins. With
// Config.Highest, a monitor on t's goroutine reads the stored mark while the
// workers run: it never decreases, and is never below an admission that
// completed before the read began.
func (s *suite) concurrent(t *testing.T) {
	ctx := s.ctx(t)
	g := s.c.New(t)
	const name = "fencetest/hot"
	var maxAdmitted atomic.Uint64
	admit := func(seq uint64) error {
		before := maxAdmitted.Load()
		err := g.Admit(ctx, fence.Token{Name: name, Seq: seq})
		if err == nil {
			if seq < before {
				t.Errorf("token %d admitted after token %d had been admitted", seq, before)
			}
			testsuite.Raise(&maxAdmitted, seq)
		}
		return err
	}
	var (
		poll  func()
		last  uint64
		reads int
	)
	if s.c.Highest != nil {
		poll = func() {
			before := maxAdmitted.Load()
			h := s.c.Highest(t, g, name)
			reads++
			if h < last {
				t.Errorf("the stored mark went from %d down to %d", last, h)
			}
			if h < before {
				t.Errorf("the stored mark %d is below token %d, admitted before the read", h, before)
			}
			last = max(last, h)
		}
	}

	admitted, stale := interleave(t, admit, poll)

	assert.Equal(t, Top, admitted+stale, "every token was admitted or rejected as stale")
	assert.Equal(t, uint64(Top), maxAdmitted.Load(), "the highest token is admitted")
	assert.Positive(t, stale, "interleaving produced no stale token")
	s.checkHighest(t, g, name, Top, "the stored mark after the load")
	checkStale(t, g.Admit(ctx, fence.Token{Name: name, Seq: Top - 1}), fence.Token{Name: name, Seq: Top - 1}, Top)
	t.Logf("admitted %d, stale %d, monitor reads %d", admitted, stale, reads)
}

// largeSeq: marks above 2^53 (where a float64 loses integers) and up to
// 1<<64-1 are compared and stored exactly.
func (s *suite) largeSeq(t *testing.T) {
	ctx := s.ctx(t)
	g := s.c.New(t)
	const name = "fencetest/large"
	steps := []struct {
		seq   uint64
		stale uint64 // the mark that rejects seq; 0 if seq is admitted
	}{
		{1<<53 + 1, 0},
		{1 << 53, 1<<53 + 1}, // the same float64 as 1<<53 + 1
		{1 << 63, 0},         // above every int64
		{1<<63 - 1, 1 << 63},
		{math.MaxUint64 - 1, 0},
		{math.MaxUint64 - 1, 0}, // an equal token
		{math.MaxUint64 - 2, math.MaxUint64 - 1},
		{math.MaxUint64, 0},
		{math.MaxUint64 - 1, math.MaxUint64}, // the same float64 as 1<<64 - 1
	}
	for _, st := range steps {
		tok := fence.Token{Name: name, Seq: st.seq}
		err := g.Admit(ctx, tok)
		if st.stale == 0 {
			assert.NoError(t, err, "Admit(%v)", tok)
			s.checkHighest(t, g, name, st.seq, "the mark after Admit(%v)", tok)
		} else {
			checkStale(t, err, tok, st.stale)
		}
	}
	fresh := fence.Token{Name: billing, Seq: math.MaxUint64}
	assert.NoError(t, g.Admit(ctx, fresh), "1<<64-1 as a first token")
	s.checkHighest(t, g, billing, math.MaxUint64)
}

// numericOrder: Seq is ordered as a number, not as its decimal text.
func (s *suite) numericOrder(t *testing.T) {
	ctx := s.ctx(t)
	g := s.c.New(t)
	require.NoError(t, g.Admit(ctx, fence.Token{Name: orders, Seq: 9}))
	assert.NoError(t, g.Admit(ctx, fence.Token{Name: orders, Seq: 10}), `10 after 9 ("10" < "9" as text)`)
	checkStale(t, g.Admit(ctx, fence.Token{Name: orders, Seq: 9}), fence.Token{Name: orders, Seq: 9}, 10)
	assert.NoError(t, g.Admit(ctx, fence.Token{Name: orders, Seq: 100}), "100 after 10")
	checkStale(t, g.Admit(ctx, fence.Token{Name: orders, Seq: 99}), fence.Token{Name: orders, Seq: 99}, 100)
	s.checkHighest(t, g, orders, 100)
}
