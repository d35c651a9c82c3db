package check

import (
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/history"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// base is 04:04:49.000 local time, so the formatted times of at(ms) are
// known whatever the machine's zone.
var base = time.Date(2026, 3, 4, 4, 4, 49, 0, time.Local).UnixNano()

// at is base plus ms milliseconds, in Unix ns.
func at(ms int64) int64 { return base + ms*int64(time.Millisecond) }

// span is a grant of worker w that ended by Unlock: [from, to] in ms.
func span(w int, wl string, g int, tok uint64, mode string, from, to int64) Span {
	return Span{
		Key: SpanKey(w, wl, g), W: w, Workload: wl, G: g, Tok: tok, Mode: mode,
		Grant: at(from), End: at(to), How: "unlock", EffectiveEnd: at(to),
	}
}

// keys lists the (Before, After) keys of vs.
func keys(vs []Violation) [][2]string {
	var out [][2]string
	for _, v := range vs {
		out = append(out, [2]string{v.Before.Key, v.After.Key})
	}
	return out
}

func TestSpans(t *testing.T) {
	ev := func(w int, wl string, g int, kind string, ms int64) history.Event {
		return history.Event{W: w, Workload: wl, G: g, Kind: kind, T: at(ms)}
	}
	grant := func(w int, wl string, g int, tok uint64, mode string, ms int64) history.Event {
		e := ev(w, wl, g, history.Grant, ms)
		e.Tok, e.Mode = tok, mode
		return e
	}
	end := func(w int, wl string, g int, how string, ms, deadline int64) history.Event {
		e := ev(w, wl, g, history.End, ms)
		e.How = how
		if deadline != 0 {
			e.Deadline = at(deadline)
		}
		return e
	}
	events := []history.Event{
		// Out of order, as several files would be: the checker must not care.
		end(1, "mutex", 2, "done", 900, 700), // starved: noticed at 900, deadline 700
		grant(1, "mutex", 2, 9, "x", 500),
		ev(1, "mutex", 1, history.Acquire, 0),
		grant(1, "mutex", 1, 2, "x", 10),
		{W: 1, Workload: "mutex", G: 1, Kind: history.Op, Reg: history.Fenced, Tok: 2, Call: at(20), Ret: at(21)},
		end(1, "mutex", 1, "unlock", 100, 0),
		{W: 1, Workload: "mutex", G: 1, Kind: history.Released, T: at(110), Err: "boom"},
		grant(2, "mutex", 1, 5, "x", 200),
		end(2, "mutex", 1, "done", 300, 0),    // Done for another reason: no deadline
		grant(3, "mutex", 1, 11, "x", 950),    // no End: runs to the run's end
		grant(2, "mutex", 2, 12, "x", 990),    // Deadline after End: End counts
		end(2, "mutex", 2, "done", 995, 1500), //
		ev(4, "mutex", 1, history.Acquire, 5), // failed acquire: no span
		ev(4, "mutex", 1, history.Fail, 6),
		grant(1, "rwmutex", 1, 3, "s", 10),
		end(1, "rwmutex", 1, "unlock", 40, 0),
	}
	got := Spans(events, at(2000))
	require.Len(t, got, 2)
	mutex := got["mutex"]
	var ks []string
	for _, s := range mutex {
		ks = append(ks, s.Key)
	}
	assert.Equal(t, []string{"w1/mutex#1", "w2/mutex#1", "w1/mutex#2", "w3/mutex#1", "w2/mutex#2"}, ks, "grant order")

	assert.Equal(t, Span{
		Key: "w1/mutex#1", W: 1, Workload: "mutex", G: 1, Tok: 2, Mode: "x",
		Acquire: at(0), Grant: at(10), End: at(100), How: "unlock", Released: at(110), ReleaseErr: "boom",
		EffectiveEnd: at(100),
	}, mutex[0])
	assert.Equal(t, at(300), mutex[1].EffectiveEnd, "done without deadline: End.T")
	assert.Equal(t, at(700), mutex[2].EffectiveEnd, "deadline before End.T: the deadline")
	assert.Equal(t, at(900), mutex[2].End)
	assert.True(t, mutex[3].Open())
	assert.Equal(t, at(2000), mutex[3].EffectiveEnd, "no End: the run's end")
	assert.Equal(t, at(995), mutex[4].EffectiveEnd, "deadline after End.T: End.T")
	assert.False(t, mutex[4].Open())

	require.Len(t, got["rwmutex"], 1)
	assert.Equal(t, "w1/rwmutex#1", got["rwmutex"][0].Key)
	assert.Equal(t, "s", got["rwmutex"][0].Mode)

	// A deadline before the grant (the session was already past it) makes
	// an empty span, not a negative one.
	early := Spans([]history.Event{grant(1, "mutex", 1, 2, "x", 100), end(1, "mutex", 1, "done", 150, 50)}, at(200))
	assert.Equal(t, at(100), early["mutex"][0].EffectiveEnd)
}

func TestSpanString(t *testing.T) {
	s := span(1, "mutex", 1, 2, "x", 2, 811)
	assert.Equal(t, "w1/mutex#1 tok 2 [04:04:49.002, 04:04:49.811]", s.String())
}

func TestCheckDoneAfterSuccessor(t *testing.T) {
	t.Run("MutexSequential", func(t *testing.T) {
		spans := []Span{
			span(1, "mutex", 1, 2, "x", 0, 100),
			span(2, "mutex", 1, 3, "x", 100, 200), // granted the instant the other stopped
			span(3, "mutex", 1, 4, "x", 250, 300),
		}
		assert.Empty(t, DoneAfterSuccessor("mutex", spans, 2))
	})
	t.Run("MutexOverlap", func(t *testing.T) {
		a := span(1, "mutex", 1, 2, "x", 2, 811)
		b := span(4, "mutex", 1, 3, "x", 9, 556)
		c := span(2, "mutex", 1, 4, "x", 900, 1000)
		got := DoneAfterSuccessor("mutex", []Span{c, b, a}, 2)
		require.Len(t, got, 1)
		assert.Equal(t, KindDoneAfterSuccessor, got[0].Kind)
		assert.Equal(t, a, got[0].Before)
		assert.Equal(t, b, got[0].After)
		assert.Equal(t, 547*time.Millisecond, got[0].Overlap, "b's grant to b's end, the earlier end")
		assert.Equal(t, "w4/mutex#1 tok 3 [04:04:49.009, 04:04:49.556] granted while "+
			"w1/mutex#1 tok 2 [04:04:49.002, 04:04:49.811] acted", got[0].String())
	})
	t.Run("StarvedHolderPastDeadline", func(t *testing.T) {
		// The holder noticed Done at 900, long after its successor's grant
		// at 500, but its session's deadline (Done) passed at 450: it did
		// not act after 450. Without the deadline, the same history fails.
		starved := span(1, "mutex", 1, 2, "x", 0, 900)
		starved.How, starved.Deadline, starved.EffectiveEnd = "done", at(450), at(450)
		next := span(2, "mutex", 1, 3, "x", 500, 600)
		assert.Empty(t, DoneAfterSuccessor("mutex", []Span{starved, next}, 2))

		starved.Deadline, starved.EffectiveEnd = 0, at(900)
		got := DoneAfterSuccessor("mutex", []Span{starved, next}, 2)
		assert.Equal(t, [][2]string{{"w1/mutex#1", "w2/mutex#1"}}, keys(got))
		assert.Equal(t, 100*time.Millisecond, got[0].Overlap)
	})
	t.Run("DoneLaterThanItsDeadline", func(t *testing.T) {
		// A library that reports a deadline of 450 but closes Done only
		// at 880: the holder found Done open at 700, after its
		// successor's grant at 500. Spans keeps the end at 700.
		spans := Spans([]history.Event{
			{W: 1, Workload: "mutex", G: 1, Kind: history.Grant, T: at(0), Tok: 2, Mode: "x"},
			{W: 1, Workload: "mutex", G: 1, Kind: history.End, T: at(900), How: "done", Deadline: at(450), Open: at(700)},
			{W: 2, Workload: "mutex", G: 1, Kind: history.Grant, T: at(500), Tok: 3, Mode: "x"},
			{W: 2, Workload: "mutex", G: 1, Kind: history.End, T: at(600), How: "unlock"},
		}, at(1000))["mutex"]
		got := DoneAfterSuccessor("mutex", spans, 2)
		assert.Equal(t, [][2]string{{"w1/mutex#1", "w2/mutex#1"}}, keys(got))
		assert.Equal(t, 100*time.Millisecond, got[0].Overlap)
	})
	t.Run("OpenSpan", func(t *testing.T) {
		// A holder with no End (killed, say) is taken to act until the
		// run's end: its successor is reported, for the caller to excuse.
		spans := Spans([]history.Event{
			{W: 1, Workload: "election", G: 1, Kind: history.Grant, T: at(0), Tok: 7, Mode: "x"},
			{W: 2, Workload: "election", G: 1, Kind: history.Grant, T: at(3000), Tok: 9, Mode: "x"},
			{W: 2, Workload: "election", G: 1, Kind: history.End, T: at(3500), How: "unlock"},
		}, at(5000))["election"]
		got := DoneAfterSuccessor("election", spans, 2)
		assert.Equal(t, [][2]string{{"w1/election#1", "w2/election#1"}}, keys(got))
		assert.Equal(t, 500*time.Millisecond, got[0].Overlap)
	})
}

// TestCheckDoneAfterSuccessorShared: each workload's capacity (one
// holder, N permits, readers sharing).
func TestCheckDoneAfterSuccessorShared(t *testing.T) {
	t.Run("ExclusiveWorkloads", func(t *testing.T) {
		for _, wl := range []string{"mutex", "election", "redis", "redlock"} {
			spans := []Span{span(1, wl, 1, 0, "x", 0, 100), span(2, wl, 1, 0, "x", 50, 150)}
			assert.Len(t, DoneAfterSuccessor(wl, spans, 2), 1, wl)
		}
	})
	t.Run("Semaphore", func(t *testing.T) {
		p1 := span(1, "semaphore", 1, 2, "s", 0, 100)
		p2 := span(2, "semaphore", 1, 3, "s", 10, 200)
		p3 := span(3, "semaphore", 1, 4, "s", 100, 300) // p1 gone: two act
		assert.Empty(t, DoneAfterSuccessor("semaphore", []Span{p1, p2, p3}, 2))

		p3 = span(3, "semaphore", 1, 4, "s", 50, 300) // p1 and p2 act: a third
		got := DoneAfterSuccessor("semaphore", []Span{p1, p2, p3}, 2)
		assert.Equal(t, [][2]string{{"w1/semaphore#1", "w3/semaphore#1"}, {"w2/semaphore#1", "w3/semaphore#1"}}, keys(got))
		assert.Empty(t, DoneAfterSuccessor("semaphore", []Span{p1, p2, p3}, 3), "three permits")
	})
	t.Run("RWMutex", func(t *testing.T) {
		r1 := span(1, "rwmutex", 1, 2, "s", 0, 100)
		r2 := span(2, "rwmutex", 1, 3, "s", 10, 120)
		w := span(3, "rwmutex", 1, 4, "x", 120, 200)
		r3 := span(4, "rwmutex", 1, 5, "s", 200, 300)
		assert.Empty(t, DoneAfterSuccessor("rwmutex", []Span{r1, r2, w, r3}, 2), "readers share; writer alone")

		early := span(3, "rwmutex", 1, 4, "x", 110, 200) // writer while r2 reads
		late := span(4, "rwmutex", 1, 5, "s", 150, 300)  // reader while the writer writes
		got := DoneAfterSuccessor("rwmutex", []Span{r1, r2, early, late}, 2)
		assert.Equal(t, [][2]string{{"w2/rwmutex#1", "w3/rwmutex#1"}, {"w3/rwmutex#1", "w4/rwmutex#1"}}, keys(got))
	})
}

// TestCheckDoneAfterSuccessorRandom compares the sweep with the definition,
// pair by pair, on random histories.
func TestCheckDoneAfterSuccessorRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, wl := range []string{"mutex", "rwmutex", "semaphore"} {
		spans := randomSpans(rng, wl, 400)
		var want [][2]string
		for _, b := range spans {
			var acting []Span
			for _, a := range spans {
				if byGrant(a, b) < 0 && a.EffectiveEnd > b.Grant {
					acting = append(acting, a)
				}
			}
			for _, a := range acting {
				switch {
				case wl == "semaphore" && len(acting) < 2:
				case wl == "rwmutex" && a.Mode == "s" && b.Mode == "s":
				default:
					want = append(want, [2]string{a.Key, b.Key})
				}
			}
		}
		got := DoneAfterSuccessor(wl, spans, 2)
		require.NotEmpty(t, want, wl)
		assert.ElementsMatch(t, want, keys(got), wl)
	}
}

func TestTokenRegressions(t *testing.T) {
	t.Run("MutexIncreasing", func(t *testing.T) {
		spans := []Span{
			span(1, "mutex", 1, 2, "x", 0, 100),
			span(2, "mutex", 1, 5, "x", 150, 200),
			span(1, "mutex", 2, 9, "x", 250, 300),
		}
		assert.Empty(t, TokenRegressions("mutex", spans))
	})
	t.Run("MutexRegression", func(t *testing.T) {
		a := span(1, "mutex", 1, 2, "x", 0, 100)
		b := span(2, "mutex", 1, 9, "x", 150, 200)
		c := span(3, "mutex", 1, 5, "x", 250, 300) // below b, which ended first
		d := span(1, "mutex", 2, 9, "x", 350, 400) // equal to b: also a regression
		got := TokenRegressions("mutex", []Span{d, c, b, a})
		require.Len(t, got, 2)
		assert.Equal(t, [][2]string{{"w2/mutex#1", "w3/mutex#1"}, {"w2/mutex#1", "w1/mutex#2"}}, keys(got))
		assert.Equal(t, KindTokenRegression, got[0].Kind)
		assert.Equal(t, "token regression: w2/mutex#1 tok 9 [04:04:49.150, 04:04:49.200] ended before "+
			"w3/mutex#1 tok 5 [04:04:49.250, 04:04:49.300]", got[0].String())
	})
	t.Run("OverlappingNotOrdered", func(t *testing.T) {
		// Neither ended before the other was granted: the lock did not order
		// them (DoneAfterSuccessor's business), so their tokens are not compared.
		spans := []Span{span(1, "mutex", 1, 9, "x", 0, 100), span(2, "mutex", 1, 5, "x", 100, 200)}
		assert.Empty(t, TokenRegressions("mutex", spans))
	})
	t.Run("EffectiveEnd", func(t *testing.T) {
		// Ordered only by the deadline: the starved holder noticed late.
		a := span(1, "election", 1, 9, "x", 0, 500)
		a.Deadline, a.EffectiveEnd = at(100), at(100)
		b := span(2, "election", 1, 5, "x", 200, 300)
		assert.Len(t, TokenRegressions("election", []Span{a, b}), 1)
	})
	t.Run("RedlockNoToken", func(t *testing.T) {
		spans := []Span{span(1, "redlock", 1, 0, "x", 0, 100), span(2, "redlock", 1, 0, "x", 150, 200)}
		assert.Empty(t, TokenRegressions("redlock", spans))
	})
	t.Run("RWMutex", func(t *testing.T) {
		r1 := span(1, "rwmutex", 1, 8, "s", 0, 100)
		r2 := span(2, "rwmutex", 1, 6, "s", 150, 200) // readers: not ordered
		w := span(3, "rwmutex", 1, 9, "x", 250, 300)
		r3 := span(4, "rwmutex", 1, 10, "s", 350, 400)
		assert.Empty(t, TokenRegressions("rwmutex", []Span{r1, r2, w, r3}))

		wLow := span(3, "rwmutex", 1, 7, "x", 250, 300) // below reader r1
		rLow := span(4, "rwmutex", 1, 7, "s", 350, 400) // not above the writer
		got := TokenRegressions("rwmutex", []Span{r1, r2, wLow, rLow})
		assert.Equal(t, [][2]string{{"w1/rwmutex#1", "w3/rwmutex#1"}, {"w3/rwmutex#1", "w4/rwmutex#1"}}, keys(got))
	})
	t.Run("SemaphoreDuplicates", func(t *testing.T) {
		p1 := span(1, "semaphore", 1, 8, "s", 0, 100)
		p2 := span(2, "semaphore", 1, 6, "s", 150, 200) // lower, but permits are not ordered
		assert.Empty(t, TokenRegressions("semaphore", []Span{p1, p2}))

		p3 := span(3, "semaphore", 1, 8, "s", 50, 120)
		got := TokenRegressions("semaphore", []Span{p1, p2, p3})
		assert.Equal(t, [][2]string{{"w1/semaphore#1", "w3/semaphore#1"}}, keys(got))
		assert.Equal(t, KindDuplicateToken, got[0].Kind)
		assert.Equal(t, "duplicate token: "+p1.String()+" and "+p3.String(), got[0].String())
	})
}

// TestTokenRegressionsRandom compares the sweep with the definition on
// random histories: the same grants are reported, each with a witness of
// the highest token among those that ended before it.
func TestTokenRegressionsRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, wl := range []string{"mutex", "rwmutex"} {
		spans := randomSpans(rng, wl, 500)
		want := map[string]uint64{} // regressing B -> highest token ordered before it
		for _, b := range spans {
			for _, a := range spans {
				ordered := wl == "mutex" || a.Mode == "x" || b.Mode == "x"
				if ordered && a.Tok != 0 && b.Tok != 0 && a.EffectiveEnd < b.Grant && a.Tok >= b.Tok {
					want[b.Key] = max(want[b.Key], a.Tok)
				}
			}
		}
		require.NotEmpty(t, want, wl)
		got := map[string]uint64{}
		for _, v := range TokenRegressions(wl, spans) {
			assert.Less(t, v.Before.EffectiveEnd, v.After.Grant)
			got[v.After.Key] = v.Before.Tok
		}
		assert.Equal(t, want, got, wl)
	}
}

// randomSpans makes n grants of wl by 8 workers, with random times, modes
// and tokens (mostly increasing, some out of order, some 0), overlapping
// now and then.
func randomSpans(rng *rand.Rand, wl string, n int) []Span {
	var spans []Span
	t := int64(0)
	for i := range n {
		t += rng.Int64N(60)
		mode := "x"
		if rng.IntN(3) > 0 && wl != "mutex" {
			mode = "s"
		}
		tok := uint64(10 + 2*i)
		switch rng.IntN(20) {
		case 0:
			tok -= uint64(rng.IntN(30))
		case 1:
			tok = 0
		}
		spans = append(spans, span(1+i%8, wl, 1+i/8, tok, mode, t, t+rng.Int64N(100)))
	}
	return spans
}

// linWL is the workload of TestLinearizable's histories.
const linWL = "mutex"

// linOp is an op of linWL's fenced register: w's grant g at tok, called
// at call and returned at ret (0: no reply).
func linOp(w, g int, tok uint64, read bool, v int64, res string, call, ret int64) history.Event {
	e := history.Event{
		W: w, Workload: linWL, G: g, Kind: history.Op, Reg: history.Fenced, Tok: tok,
		Read: read, Value: v, Result: res, Call: at(call),
	}
	if ret != 0 {
		e.Ret = at(ret)
	}
	return e
}

func linRead(w int, tok uint64, v int64, res string, call, ret int64) history.Event {
	return linOp(w, 1, tok, true, v, res, call, ret)
}

func linWrite(w int, tok uint64, v int64, res string, call, ret int64) history.Event {
	return linOp(w, 1, tok, false, v, res, call, ret)
}

// checkLin checks events' linearizability, and that every fenced op
// counted.
func checkLin(t *testing.T, events ...history.Event) (bool, string) {
	t.Helper()
	ok, n, info := Linearizable(linWL, events)
	assert.Equal(t, len(fencedOps(linWL, events)), n)
	return ok, info
}

func TestLinearizable(t *testing.T) {
	const wl = linWL
	read, write, check := linRead, linWrite, checkLin
	t.Run("CorrectConcurrent", func(t *testing.T) {
		ok, info := check(t,
			read(1, 2, 0, "ok", 0, 2),
			write(1, 2, 1, "ok", 3, 5),
			read(1, 2, 1, "ok", 6, 8),
			// w1 pauses; w2 (tok 5) takes over; w1's late ops overlap w2's
			// and are refused.
			read(2, 5, 1, "ok", 10, 12),
			write(2, 5, 2, "ok", 13, 15),
			write(1, 2, 2, "stale", 14, 20),
			read(1, 2, 0, "stale", 21, 22),
			// Two holders' writes overlap (a double grant the fence absorbs):
			// w3's tok 7 write wins, w2's is applied first.
			write(2, 5, 3, "ok", 30, 40),
			write(3, 7, 4, "ok", 31, 39),
			read(3, 7, 4, "ok", 41, 42),
			write(2, 5, 5, "stale", 43, 44),
			// Readers at one token, concurrently.
			read(4, 7, 4, "ok", 50, 60),
			read(5, 7, 4, "ok", 51, 55),
			read(6, 9, 4, "ok", 52, 53),
			// Not this check's: another workload, the unfenced register, no token.
			history.Event{W: 7, Workload: "rwmutex", Kind: history.Op, Reg: history.Fenced, Tok: 1, Result: "ok", Call: at(70), Ret: at(71)},
			history.Event{W: 7, Workload: wl, Kind: history.Op, Reg: history.Unfenced, Tok: 1, Value: 99, Read: true, Result: "ok", Call: at(70), Ret: at(71)},
			history.Event{W: 7, Workload: wl, Kind: history.Op, Reg: history.Fenced, Tok: 0, Value: 99, Read: true, Result: "ok", Call: at(70), Ret: at(71)},
			history.Event{W: 7, Workload: wl, Kind: history.Grant, Tok: 1, T: at(70)},
		)
		assert.True(t, ok, info)
	})
	t.Run("NoOps", func(t *testing.T) {
		ok, n, _ := Linearizable(wl, nil)
		assert.True(t, ok)
		assert.Zero(t, n)
	})
	t.Run("RaisingReads", func(t *testing.T) {
		// pgfence admits a read as a write: w2's read at tok 5 raises the
		// mark, so w1's later write at tok 2 is refused even though no
		// write of tok 5 came before it.
		raise := func(e history.Event) history.Event { e.Raise = true; return e }
		ok, info := check(t,
			write(1, 2, 1, "ok", 0, 2),
			raise(read(2, 5, 1, "ok", 3, 4)),
			write(1, 2, 2, "stale", 5, 6),
			raise(read(1, 2, 0, "error", 7, 0)), // pending: may have done nothing
			raise(read(2, 5, 1, "ok", 8, 9)),
			history.Event{W: 3, Workload: wl, G: 1, Kind: history.Op, Reg: history.Fenced, Tok: 1, Value: 7, Result: history.Unsent, Call: at(10), Ret: at(11)}, // never sent: not an op
		)
		assert.True(t, ok, info)
		// Without Raise, the model admits that write: the guard refused a
		// current token.
		ok, _ = check(t, write(1, 2, 1, "ok", 0, 2), read(2, 5, 1, "ok", 3, 4), write(1, 2, 2, "stale", 5, 6))
		assert.False(t, ok)
		// With it, a lower write admitted after the raising read is caught.
		ok, _ = check(t, write(1, 2, 1, "ok", 0, 2), raise(read(2, 5, 1, "ok", 3, 4)), write(1, 2, 2, "ok", 5, 6))
		assert.False(t, ok)
	})
}

// TestLinearizableViolations: histories no register explains, and the
// documented limit (one token, two holders).
func TestLinearizableViolations(t *testing.T) {
	const wl = linWL
	read, write, check := linRead, linWrite, checkLin
	t.Run("StaleWriteAdmitted", func(t *testing.T) {
		ok, info := check(t,
			write(2, 5, 1, "ok", 0, 2),
			write(1, 2, 2, "ok", 10, 12), // tok 2 < mark 5, yet admitted
		)
		assert.False(t, ok)
		assert.Contains(t, info, "not linearizable: 1 of 2 ops ordered, reaching mark 5 value 1")
		assert.Contains(t, info, "w1/mutex#1 write(tok 2, 2) -> ok [04:04:49.010, 04:04:49.012]")
	})
	t.Run("StaleReadAdmitted", func(t *testing.T) {
		ok, _ := check(t, write(2, 5, 1, "ok", 0, 2), read(1, 2, 1, "ok", 10, 12))
		assert.False(t, ok)
	})
	t.Run("CurrentRefused", func(t *testing.T) {
		ok, _ := check(t, write(2, 5, 1, "ok", 0, 2), write(3, 5, 2, "stale", 10, 12))
		assert.False(t, ok)
	})
	t.Run("ReadUnexplained", func(t *testing.T) {
		// w2 reads 0 after w1's write of 1 returned: no order explains it.
		ok, _ := check(t,
			read(1, 5, 0, "ok", 0, 1),
			read(2, 5, 0, "ok", 2, 3),
			write(1, 5, 1, "ok", 4, 5),
			read(2, 5, 0, "ok", 6, 7),
		)
		assert.False(t, ok)
	})
	t.Run("SameTokenInterleaved", func(t *testing.T) {
		// The documented limit: one token, two holders, an update lost, yet
		// every reply is a register's.
		ok, info := check(t,
			read(1, 5, 0, "ok", 0, 1),
			read(2, 5, 0, "ok", 2, 3),
			write(1, 5, 1, "ok", 4, 5),
			write(2, 5, 1, "ok", 6, 7),
		)
		assert.True(t, ok, info)
	})
}

// TestLinearizablePending: ops without a reply may or may not have
// applied; the search is bounded.
func TestLinearizablePending(t *testing.T) {
	const wl = linWL
	read, write, check := linRead, linWrite, checkLin
	t.Run("PendingWriteApplied", func(t *testing.T) {
		ok, info := check(t,
			write(1, 2, 1, "ok", 0, 1),
			write(1, 3, 7, "error", 2, 0), // no reply; it did apply
			read(2, 3, 7, "ok", 10, 11),
		)
		assert.True(t, ok, info)
	})
	t.Run("PendingWriteLost", func(t *testing.T) {
		ok, info := check(t,
			write(1, 2, 1, "ok", 0, 1),
			write(1, 3, 7, "error", 2, 0), // no reply; it never arrived
			read(2, 3, 1, "ok", 10, 11),
			write(2, 3, 2, "ok", 12, 13),
			read(2, 3, 2, "ok", 14, 15),
		)
		assert.True(t, ok, info)
	})
	t.Run("PendingWriteErrorReply", func(t *testing.T) {
		// An error reply (Ret set) is as unknown as no reply.
		ok, info := check(t, write(1, 3, 7, "error", 2, 4), read(2, 3, 7, "ok", 10, 11))
		assert.True(t, ok, info)
	})
	t.Run("PendingReadAnyValue", func(t *testing.T) {
		ok, info := check(t, write(1, 2, 1, "ok", 0, 1), read(2, 1, 42, "error", 2, 0), read(2, 2, 1, "ok", 3, 4))
		assert.True(t, ok, info)
	})
	t.Run("PendingNotBeforeCall", func(t *testing.T) {
		// A pending write cannot explain a value read before it was sent.
		ok, _ := check(t, read(2, 3, 7, "ok", 0, 1), write(1, 3, 7, "error", 2, 0))
		assert.False(t, ok)
	})
	t.Run("PendingStaleWriteNotApplied", func(t *testing.T) {
		// A pending write below the mark can only have been refused.
		events := []history.Event{write(1, 5, 1, "ok", 0, 1), write(2, 2, 99, "error", 2, 0)}
		ok, info := check(t, append(events, read(1, 5, 1, "ok", 10, 11))...)
		assert.True(t, ok, info)
		ok, _ = check(t, append(events, read(1, 5, 99, "ok", 10, 11))...)
		assert.False(t, ok)
	})
	t.Run("PendingWriteBeforeHigher", func(t *testing.T) {
		// The pending write may land before a higher token's write...
		events := []history.Event{
			write(1, 3, 7, "error", 2, 0),
			write(2, 5, 8, "ok", 10, 20),
			read(1, 3, 7, "ok", 12, 13),
			read(2, 5, 8, "ok", 21, 22),
		}
		ok, info := check(t, events...)
		assert.True(t, ok, info)
		// ...but never after it.
		events[3] = read(2, 5, 7, "ok", 21, 22)
		ok, _ = check(t, events...)
		assert.False(t, ok)
	})
	t.Run("TimedOut", func(t *testing.T) {
		// Many concurrent writes and a read no order explains: the search
		// for one is exponential, and the bound stops it.
		var events []history.Event
		for i := range 26 {
			events = append(events, write(i, uint64(1+i), int64(i), "ok", 0, 100))
		}
		events = append(events, read(99, 30, -1, "ok", 200, 201))
		start := time.Now()
		ok, n, info := linearizable(wl, events, 20*time.Millisecond)
		assert.False(t, ok)
		assert.Equal(t, 27, n)
		assert.Equal(t, "timed out", info)
		assert.Less(t, time.Since(start), 5*time.Second)
	})
}

// TestLinearizablePendingReturns checks where pending ops end: reads at
// their call; writes when an op shows the mark above their token.
func TestLinearizablePendingReturns(t *testing.T) {
	op := func(read bool, tok uint64, res string, call, ret int64) history.Event {
		return history.Event{
			W: 1, Workload: "mutex", G: 1, Kind: history.Op, Reg: history.Fenced,
			Read: read, Tok: tok, Result: res, Call: call, Ret: ret,
		}
	}
	hist := fencedOps("mutex", []history.Event{
		op(false, 3, "error", 2, 0),  // pending write: until the refusal at 15
		op(false, 5, "ok", 10, 20),   // higher token admitted, returns at 20
		op(true, 4, "stale", 11, 15), // mark above 4 >= 3 shown at 15
		op(true, 1, "error", 7, 0),   // pending read: at its call
		op(false, 9, "error", 8, 9),  // nothing above 9: after everything
		op(false, 3, "", 30, 0),      // pending, sent after the refusal: at its call
		op(false, 5, "error", 1, 0),  // equal token admitted does not end it; 4 refused does not
	})
	raising := func(tok uint64, call int64) history.Event {
		e := op(true, tok, "error", call, 0)
		e.Raise = true
		return e
	}
	// A pending read that raises the mark ends where an op admitted with
	// its token or a higher one returned (an equal token ends it).
	hist = append(hist, fencedOps("mutex", []history.Event{
		op(false, 5, "ok", 10, 20),
		raising(5, 12), // at 20
		raising(6, 13), // nothing at 6 or above: after everything
		raising(4, 25), // mark 5 shown before its call: at its call
	})[1:]...)
	var got []int64
	for _, o := range hist {
		got = append(got, o.Return)
	}
	assert.Equal(t, []int64{15, 20, 15, 7, math.MaxInt64, 30, math.MaxInt64, 20, math.MaxInt64, 25}, got)
}

// TestLinearizableScale checks a correct run-sized history (5000 grants,
// 40000 ops, with paused holders and pending ops) and the same history
// with one stale write admitted.
func TestLinearizableScale(t *testing.T) {
	if testing.Short() {
		t.Skip("scale")
	}
	events := syntheticRun(rand.New(rand.NewPCG(5, 6)), 5000, 4)
	start := time.Now()
	ok, n, info := Linearizable("mutex", events)
	t.Logf("correct: %d ops in %v", n, time.Since(start))
	require.True(t, ok, info)
	require.GreaterOrEqual(t, n, 40000)

	// Admit, late in the run, a write with a token far below the mark.
	i := len(events) - 100
	for events[i].Kind != history.Op || events[i].Read || events[i].Result != "ok" {
		i++
	}
	events[i].Tok = 1
	start = time.Now()
	ok, _, info = linearizable("mutex", events, 20*time.Second)
	t.Logf("stale admitted: %v", time.Since(start))
	assert.False(t, ok)
	assert.True(t, strings.HasPrefix(info, "not linearizable: "), info)
}

// syntheticRun makes a correct mutex history of n grants by 8 workers,
// each grant doing rounds of read then write value+1 on the fenced
// register. Every 50th holder pauses at the end of its grant and its last
// round arrives late, concurrent with its successor's first, refused;
// every 97th write gets no reply (applied or not, alternately).
func syntheticRun(rng *rand.Rand, n, rounds int) []history.Event {
	var events []history.Event
	var value int64
	t := int64(0)
	tick := func() int64 { t += 1 + rng.Int64N(3); return at(t) }
	op := func(w, g int, tok uint64, read bool, v int64, res string, call, ret int64) {
		events = append(events, history.Event{
			W: w, Workload: "mutex", G: g, Kind: history.Op, Reg: history.Fenced, Tok: tok,
			Read: read, Value: v, Result: res, Call: call, Ret: ret,
		})
	}
	writes := 0
	for i := range n {
		w, g, tok := 1+i%8, 1+i/8, uint64(10+3*i)
		events = append(events, history.Event{W: w, Workload: "mutex", G: g, Kind: history.Grant, T: tick(), Tok: tok, Mode: "x"})
		for range rounds {
			op(w, g, tok, true, value, "ok", tick(), tick())
			writes++
			call := tick()
			if writes%97 == 0 {
				op(w, g, tok, false, value+1, "error", call, 0)
				if writes%2 == 0 {
					value++ // applied
				}
				continue
			}
			value++
			op(w, g, tok, false, value, "ok", call, tick())
		}
		if i%50 == 49 {
			// Paused: the successor's ops come first, then this one's
			// late round, refused.
			next := uint64(10 + 3*(i+1))
			nw, ng := 1+(i+1)%8, 1+(i+1)/8
			call := tick()
			op(nw, ng, next, true, value, "ok", tick(), tick())
			value++
			op(nw, ng, next, false, value, "ok", tick(), tick())
			op(w, g, tok, false, value+100, "stale", call, tick())
		}
		events = append(events, history.Event{W: w, Workload: "mutex", G: g, Kind: history.End, T: tick(), How: "unlock"})
	}
	return events
}

func TestStaleAdmitted(t *testing.T) {
	w := func(lock string, tok uint64) history.Record {
		return history.Record{Kind: history.Write, Lock: lock, Tok: tok}
	}
	records := []history.Record{
		w("a", 2), w("a", 2), w("b", 9), w("a", 5),
		{Kind: history.Overlap, Lock: "a", A: "w1/g1", B: "w2/g1"},
		w("a", 5), w("b", 10),
	}
	assert.Empty(t, StaleAdmitted(records), "equal tokens; locks apart")

	records = append(records, w("a", 3), w("a", 6), w("a", 4), w("b", 10))
	assert.Equal(t, []history.Record{w("a", 3), w("a", 4)}, StaleAdmitted(records))
}

func TestDoubleGrants(t *testing.T) {
	over := func(lock, a, b string) history.Record {
		return history.Record{Kind: history.Overlap, Lock: lock, A: a, B: b}
	}
	lost := history.Record{Kind: history.LostUpdate, Lock: "a"}
	byLock := func(rs []history.Record) map[string]int {
		m := map[string]int{}
		for _, r := range rs {
			m[r.Lock+" "+r.Kind]++
		}
		return m
	}
	assert.Empty(t, DoubleGrants([]history.Record{{Kind: history.Write, Lock: "a", Tok: 1}}))
	got := DoubleGrants([]history.Record{
		over("a", "w1/g1", "w2/g1"),
		over("a", "w1/g1", "w2/g1"), // the same pair, another round
		over("a", "w2/g1", "w1/g1"), // the same pair, the other way round
		over("a", "w1/g1", "w3/g1"),
		over("b", "w1/g1", "w2/g1"),
		lost, lost,
	})
	assert.Equal(t, map[string]int{"a overlap": 2, "b overlap": 1, "a lost-update": 2}, byLock(got))
}

// BenchmarkCheckers times each checker on run-sized input: 5000 spans,
// 40000 fenced ops.
func BenchmarkCheckers(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 8))
	events := syntheticRun(rng, 5000, 4)
	spans := Spans(events, at(1<<40))["mutex"]
	rw := randomSpans(rng, "rwmutex", 5000)
	b.Run("Spans", func(b *testing.B) {
		for b.Loop() {
			Spans(events, at(1<<40))
		}
	})
	b.Run("DoneAfterSuccessor", func(b *testing.B) {
		for b.Loop() {
			DoneAfterSuccessor("mutex", spans, 2)
			DoneAfterSuccessor("rwmutex", rw, 2)
		}
	})
	b.Run("TokenRegressions", func(b *testing.B) {
		for b.Loop() {
			TokenRegressions("mutex", spans)
			TokenRegressions("rwmutex", rw)
		}
	})
	b.Run("Linearizable", func(b *testing.B) {
		for b.Loop() {
			if ok, _, info := Linearizable("mutex", events); !ok {
				b.Fatal(info)
			}
		}
	})
}

// The pattern a violation's line follows, times included.
var violationLine = regexp.MustCompile(`^w\d+/\w+#\d+ tok \d+ \[\d\d:\d\d:\d\d\.\d{3}, \d\d:\d\d:\d\d\.\d{3}\] granted while w\d+/\w+#\d+ tok \d+ \[\d\d:\d\d:\d\d\.\d{3}, \d\d:\d\d:\d\d\.\d{3}\] acted$`)

func TestCheckViolationFormat(t *testing.T) {
	// Times far from base: the format holds for any instant.
	a := Span{Key: SpanKey(1, "mutex", 1), Tok: 2, Grant: time.Now().UnixNano(), EffectiveEnd: time.Now().Add(time.Second).UnixNano()}
	b := a
	b.Key, b.Tok = SpanKey(2, "mutex", 1), 3
	v := Violation{Kind: KindDoneAfterSuccessor, Before: a, After: b}
	assert.Regexp(t, violationLine, v.String())
	assert.Equal(t, fmt.Sprintf("%s: %s, %s", "other", a, b), Violation{Kind: "other", Before: a, After: b}.String())
}

// The stale-leader evidence: only a first revoke proposed by a member that
// had led an earlier term, and did not lead the revoke's term, excuses.
func TestStaleRevokeEvidence(t *testing.T) {
	ev := evidence{
		revokes: map[int64]revoke{
			1: {Index: 10, Term: 3, Lease: 1, From: 0xa}, // a led term 2, b leads 3: stale
			2: {Index: 11, Term: 3, Lease: 2, From: 0xb}, // the leader's own expiry
			3: {Index: 12, Term: 3, Lease: 3, From: 0xc}, // c never led: a client's Close through a follower
			4: {Index: 13, Term: 9, Lease: 4, From: 0xa}, // term 9's leader unknown
		},
		leaders: map[uint64]uint16{2: 0xa, 3: 0xb},
		led:     map[uint16][]uint64{0xa: {2}, 0xb: {3}},
	}
	assert.Contains(t, ev.staleRevoke(1), "by a request of member …000a, leader of term 2, while …000b led")
	// The terms a member led, read from several members' logs, come
	// unsorted: the evidence names the last one before the revoke's.
	ev.led[0xa] = []uint64{2, 1}
	assert.Contains(t, ev.staleRevoke(1), "leader of term 2,")
	for _, lease := range []int64{0, 2, 3, 4, 5} {
		assert.Empty(t, ev.staleRevoke(lease), "lease %d", lease)
	}
	// Only the last grant on the lease: the earlier ones ended before it.
	spans := map[string][]Span{"mutex": {
		{Key: "w1/mutex#1", Lease: 1, Grant: 10, Err: "lock: key deleted"},
		{Key: "w1/mutex#2", Lease: 1, Grant: 20, Err: "lock: key deleted"},
		{Key: "w2/mutex#1", Lease: 3, Grant: 30, How: "unlock"},
	}}
	ex := exemptions{ev: ev, last: lastOnLease(spans)}
	assert.Empty(t, ex.revoked(spans["mutex"][0]), "not the last grant on its lease")
	assert.Contains(t, ex.revoked(spans["mutex"][1]), "etcd revoke: lease 1 revoked at raft index 10")
	// A holder that saw nothing taken: its lease's first revoke was its
	// session's Close, here through a member that once led (the control).
	ev.revokes[3] = revoke{Index: 14, Term: 3, Lease: 3, From: 0xa}
	assert.NotEmpty(t, ev.staleRevoke(3), "the WAL alone would excuse it")
	assert.Empty(t, ex.revoked(spans["mutex"][2]), "a holder that saw no loss is not excused")
	spans["mutex"][2].ReleaseErr = "lock: lease gone"
	assert.NotEmpty(t, ex.revoked(spans["mutex"][2]), "an Unlock that found its lease gone")

	// The later grant's own key taken (campaign c3): it was ahead in the
	// queue (token 5 < 9) and its lease was revoked by a deposed leader;
	// the holder's was not.
	holder := Span{W: 3, Key: "w3/mutex#1", Tok: 9, Lease: 7, Grant: 40}
	later := Span{W: 4, Key: "w4/mutex#1", Tok: 5, Lease: 1, Grant: 41, Err: "lock lost: session: lease gone on the server"}
	ex.last = lastOnLease(map[string][]Span{"mutex": {holder, later}})
	assert.Contains(t, ex.of(Violation{Before: holder, After: later}), "the later grant's own: etcd revoke: lease 1")
	// The control: a later grant behind the holder in the queue (a higher
	// token) is not explained by its own key's loss.
	later.Tok = 11
	assert.Empty(t, ex.of(Violation{Before: holder, After: later}))
}

// A pause excuses a violation only if the holder was stopped between its
// acquire and the successor's grant.
func TestPauseEvidence(t *testing.T) {
	// The fault began looking for a holder at 20 and stopped it at 100.
	ex := exemptions{faults: []history.Fault{{N: 4, Class: "pause-use", Start: 20, Stopped: 100, Heal: 200, Workers: []int{7}}}}
	v := func(w int, acquire, grant int64) Violation {
		return Violation{Before: Span{W: w, Acquire: acquire, Grant: acquire + 1}, After: Span{W: 9, Grant: grant}}
	}
	assert.Contains(t, ex.of(v(7, 50, 150)), "paused: w7 stopped from")
	assert.Contains(t, ex.of(v(7, 150, 300)), "paused", "stopped while it held")
	assert.Empty(t, ex.of(v(7, 201, 300)), "stopped before its acquire")
	assert.Empty(t, ex.of(v(7, 10, 99)), "the successor granted before the stop (after the fault began)")
	assert.Empty(t, ex.of(v(8, 50, 150)), "another worker was stopped")
}
