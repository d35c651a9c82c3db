package check

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/dlock-go/dlock/integration/cluster/history"
)

// Span is one grant as its holder saw it: from the moment Lock returned it
// (Grant) to the moment the holder stopped acting under it (EffectiveEnd).
// Spans builds it from the worker's grant, end and released events that
// share (W, Workload, G).
type Span struct {
	Key      string // "w<W>/<workload>#<G>"
	W        int
	Workload string
	G        int
	Tok      uint64 // the grant's token; 0 for Redlock (no token)
	Mode     string // "x" (exclusive) or "s" (shared)
	Via      string // how it was acquired: "try", "all" (LockAll) or "" (the blocking call)
	Lease    int64  // the session's lease (etcd), when the worker knew it

	Acquire int64 // Acquire.T: when Lock was called
	Grant   int64 // Grant.T: when Lock returned the grant (Unix ns)

	// The End event; all zero when the worker wrote none (it was killed,
	// or the run stopped first).
	End      int64  // End.T
	How      string // End.How: "unlock" or "done"
	Err      string // End.Err
	Deadline int64  // End.Deadline: the session's local deadline, when the grant ended by it
	LastOpen int64  // End.Open: when the holder last found Done open

	// The Released event; zero when none.
	Released   int64
	ReleaseErr string

	// EffectiveEnd is when the holder stopped acting: End, or the session's
	// local deadline when that is earlier (Deadline > 0) but never before
	// the holder last found Done open (LastOpen), or the run's end when
	// there is no End; never before Grant.
	//
	// The deadline counts because Done closed at it: a holder starved of
	// CPU notices Done late (End) but does nothing in between, since each
	// of its rounds begins with a check of Done. The library promises to
	// signal the end at the deadline, not at the moment its caller looks.
	// LastOpen keeps the deadline honest: a library that closed Done later
	// than the deadline it reports is seen by the holder finding Done open
	// after that deadline (the stamp is taken before the check, so a
	// starved holder's stamp is early, never late).
	// (An op sent before the deadline may still reach the resource after
	// it: stopping that is the fence's job, not the lock's.)
	EffectiveEnd int64
}

// Open reports whether the span has no End event: it runs to the run's end.
// A holder that was killed wrote none, though it stopped acting when it
// died; the caller knows when that was.
func (s Span) Open() bool { return s.End == 0 }

// String formats s as "w1/mutex#1 tok 2 [04:04:49.002, 04:04:49.811]": key,
// token, grant and effective end in local time.
func (s Span) String() string {
	return fmt.Sprintf("%s tok %d [%s, %s]", s.Key, s.Tok, hms(s.Grant), hms(s.EffectiveEnd))
}

// hms formats Unix nanoseconds as local HH:MM:SS.mmm.
func hms(ns int64) string { return time.Unix(0, ns).Format("15:04:05.000") }

// SpanKey is the key of the span of worker w's grant g of workload.
func SpanKey(w int, workload string, g int) string {
	return fmt.Sprintf("w%d/%s#%d", w, workload, g)
}

// Spans builds the spans of events (any order, any mix of workers and
// workloads), by workload, each slice in grant order (ties by worker, then
// grant number). A grant with no End ends at runEnd (Unix ns). Events of
// a grant with no Grant event (a failed acquire) make no span.
func Spans(events []history.Event, runEnd int64) map[string][]Span {
	type key struct {
		w  int
		wl string
		g  int
	}
	byKey := make(map[key]*Span)
	var order []key
	get := func(e history.Event) *Span {
		k := key{e.W, e.Workload, e.G}
		s, ok := byKey[k]
		if !ok {
			s = &Span{Key: SpanKey(e.W, e.Workload, e.G), W: e.W, Workload: e.Workload, G: e.G}
			byKey[k] = s
			order = append(order, k)
		}
		return s
	}
	granted := make(map[key]bool)
	for _, e := range events {
		switch e.Kind {
		case history.Acquire:
			get(e).Acquire = e.T
		case history.Grant:
			s := get(e)
			s.Grant, s.Tok, s.Mode, s.Via, s.Lease = e.T, e.Tok, e.Mode, e.Via, e.Lease
			granted[key{e.W, e.Workload, e.G}] = true
		case history.End:
			s := get(e)
			s.End, s.How, s.Err, s.Deadline, s.LastOpen = e.T, e.How, e.Err, e.Deadline, e.Open
		case history.Released:
			s := get(e)
			s.Released, s.ReleaseErr = e.T, e.Err
		}
	}
	out := make(map[string][]Span)
	for _, k := range order {
		if !granted[k] {
			continue
		}
		s := byKey[k]
		end := runEnd
		if s.End != 0 {
			end = s.End
			if s.Deadline > 0 {
				// Done closed at the deadline, but not before the holder
				// last found it open.
				end = min(end, max(s.Deadline, s.LastOpen))
			}
		}
		s.EffectiveEnd = max(end, s.Grant)
		out[k.wl] = append(out[k.wl], *s)
	}
	for _, spans := range out {
		slices.SortFunc(spans, byGrant)
	}
	return out
}

// byGrant orders spans by grant time, then worker, then grant number.
func byGrant(a, b Span) int {
	return cmp.Or(cmp.Compare(a.Grant, b.Grant), cmp.Compare(a.W, b.W), cmp.Compare(a.G, b.G))
}

// Violation kinds.
const (
	// KindDoneAfterSuccessor: a grant was made while a holder it conflicts
	// with still acted (Before: that holder; After: the new grant).
	KindDoneAfterSuccessor = "done-after-successor"
	// KindTokenRegression: Before ended before After was granted, the lock
	// orders them, yet Before's token is not below After's.
	KindTokenRegression = "token-regression"
	// KindDuplicateToken: two grants of a semaphore carry one token.
	KindDuplicateToken = "duplicate-token"
)

// Violation is one finding of DoneAfterSuccessor or TokenRegressions: two
// grants that break a rule together.
type Violation struct {
	Kind   string // one of the Kind constants
	Before Span   // the grant still acting (or ended first)
	After  Span   // the later grant
	// Overlap is how long both acted (KindDoneAfterSuccessor only): from
	// After's grant to the earlier of the two effective ends.
	Overlap time.Duration
}

// String describes v in one line, e.g. "w4/mutex#1 tok 3 [04:04:49.009,
// 04:04:49.556] granted while w1/mutex#1 tok 2 [04:04:49.002, 04:04:49.811]
// acted".
func (v Violation) String() string {
	switch v.Kind {
	case KindDoneAfterSuccessor:
		return fmt.Sprintf("%s granted while %s acted", v.After, v.Before)
	case KindTokenRegression:
		return fmt.Sprintf("token regression: %s ended before %s", v.Before, v.After)
	case KindDuplicateToken:
		return fmt.Sprintf("duplicate token: %s and %s", v.Before, v.After)
	}
	return fmt.Sprintf("%s: %s, %s", v.Kind, v.Before, v.After)
}

// DoneAfterSuccessor reports every grant made while holders it conflicts
// with still acted beyond the workload's capacity: a grant B and an
// earlier one A conflict when A.EffectiveEnd > B.Grant and
//
//   - "semaphore": at least permits other grants (A among them) act at
//     B.Grant; B is reported with each of them. permits < 1 counts as 1.
//   - "rwmutex": A or B has Mode "x" (any other mode counts as "x").
//   - any other workload ("mutex", "election", "redis", "redlock"):
//     always (the lock is exclusive).
//
// It is the holder-side half of mutual exclusion: the library promises
// that a holder has stopped acting (its Done closed) before anyone else is
// granted the lock. The check uses effective ends (see Span), so a holder
// starved past its session's deadline is not blamed for noticing late.
// Violations come in After's grant order, each with the overlap.
//
// Cost: O(n log n + n·k) for n spans, k the most grants acting at once.
func DoneAfterSuccessor(workload string, spans []Span, permits int) []Violation {
	spans = slices.Clone(spans)
	slices.SortFunc(spans, byGrant)
	permits = max(permits, 1)
	var out []Violation
	var acting []Span // grants whose effective end is after the current grant
	for _, b := range spans {
		acting = slices.DeleteFunc(acting, func(a Span) bool { return a.EffectiveEnd <= b.Grant })
		for _, a := range acting {
			var conflict bool
			switch workload {
			case "semaphore":
				conflict = len(acting) >= permits
			case "rwmutex":
				conflict = a.Mode != "s" || b.Mode != "s"
			default:
				conflict = true
			}
			if conflict {
				overlap := min(a.EffectiveEnd, b.EffectiveEnd) - b.Grant
				out = append(out, Violation{
					Kind: KindDoneAfterSuccessor, Before: a, After: b,
					Overlap: time.Duration(max(overlap, 0)),
				})
			}
		}
		acting = append(acting, b)
	}
	return out
}

// TokenRegressions reports grants whose token does not exceed that of a
// grant the lock ordered before them: for spans A and B with
// A.EffectiveEnd < B.Grant (A stopped before B was granted), A.Tok < B.Tok
// must hold where the lock orders the two:
//
//   - "rwmutex": when A or B has Mode "x" (two readers are not ordered).
//   - "semaphore": never (permits are not ordered); instead, two grants
//     with different keys must not carry the same token
//     (KindDuplicateToken, Before the earlier grant).
//   - any other workload: always (the lock is exclusive).
//
// This is the property fencing rests on: a successor's token is above
// every token that came before it, so the resource can refuse the older
// holder. Spans with Tok 0 (Redlock: no token) are skipped. Each
// regressing B is reported once (KindTokenRegression), with the A of
// highest token among those that ended before it; in B's grant order.
//
// Cost: O(n log n) for n spans (a sweep in grant order keeping the
// highest token among the spans already ended).
func TokenRegressions(workload string, spans []Span) []Violation {
	var tokened []Span
	for _, s := range spans {
		if s.Tok != 0 {
			tokened = append(tokened, s)
		}
	}
	slices.SortFunc(tokened, byGrant)
	if workload == "semaphore" {
		return duplicateTokens(tokened)
	}
	ended := slices.Clone(tokened)
	slices.SortFunc(ended, func(a, b Span) int { return cmp.Compare(a.EffectiveEnd, b.EffectiveEnd) })
	var out []Violation
	var maxAll, maxX *Span // highest token among ended spans: any mode; mode "x"
	j := 0
	for _, b := range tokened {
		for ; j < len(ended) && ended[j].EffectiveEnd < b.Grant; j++ {
			a := &ended[j]
			if maxAll == nil || a.Tok > maxAll.Tok {
				maxAll = a
			}
			if a.Mode != "s" && (maxX == nil || a.Tok > maxX.Tok) {
				maxX = a
			}
		}
		prev := maxAll
		if workload == "rwmutex" && b.Mode == "s" {
			prev = maxX
		}
		if prev != nil && prev.Tok >= b.Tok {
			out = append(out, Violation{Kind: KindTokenRegression, Before: *prev, After: b})
		}
	}
	return out
}

// duplicateTokens reports each span (in grant order) whose token an
// earlier span with a different key carries.
func duplicateTokens(spans []Span) []Violation {
	first := make(map[uint64]Span)
	var out []Violation
	for _, s := range spans {
		a, ok := first[s.Tok]
		switch {
		case !ok:
			first[s.Tok] = s
		case a.Key != s.Key:
			out = append(out, Violation{Kind: KindDuplicateToken, Before: a, After: s})
		}
	}
	return out
}

// LinearizableTimeout bounds Linearizable's search.
const LinearizableTimeout = 60 * time.Second

// Linearizable checks, with porcupine, that the fenced register's replies
// to workload's ops (Kind op, Reg "fenced", Tok > 0) are those of one
// register applying them one at a time, each at an instant between its
// Call and Ret, under the guard's rule. The register's state is (mark,
// value), initially (0, 0):
//
//   - read(tok): tok < mark: "stale"; else "ok" with value (and, when the
//     guard admits a read as it admits a write, Event.Raise: pgfence, the
//     mark becomes tok).
//   - write(tok, v): tok < mark: "stale"; else "ok" and the state becomes
//     (tok, v).
//
// An op whose outcome is unknown (Result "error", or Ret 0: no reply) is
// pending: it may have taken effect at any instant after its Call, or
// never. It is given to porcupine with an output the model accepts
// whatever the state (any value read; a write still applies when its
// tok >= mark) and a return after every op that could observe it:
// "took effect at t" is the op linearized at t, and "never" is it
// linearized where its effect can no longer be observed (see
// pendingReturns for how late that must be).
//
// This is the resource-side half of mutual exclusion, end to end: it fails
// when the guard admits a stale token or refuses a current one, or when a
// read returns a value no order of the writes explains. It checks the
// register, not the holders' intent: two holders with one token whose
// read-modify-writes interleave (both read 0, both write 1) are
// linearizable here; the unfenced control's lost updates show those.
//
// ok is false when the history is not linearizable (info, a few lines,
// says where the search stopped) or when the search did not finish within
// LinearizableTimeout (info "timed out"). ops is how many ops were
// checked.
//
// Cost: linear in the number of ops for a history whose ops are mostly
// sequential (one holder at a time); concurrent ops (readers, a paused
// holder's late ops, pending ops) add search, bounded by the timeout. A
// history that is not linearizable is searched twice, the second time
// recording the longest orders found, for info (several times slower);
// that pass is bounded by a tenth of the timeout and reports the longest
// order it found by then.
func Linearizable(workload string, events []history.Event) (ok bool, ops int, info string) {
	return linearizable(workload, events, LinearizableTimeout)
}

func linearizable(workload string, events []history.Event, timeout time.Duration) (bool, int, string) {
	hist := fencedOps(workload, events)
	if len(hist) == 0 {
		return true, 0, "no fenced ops"
	}
	switch porcupine.CheckOperationsTimeout(fencedModel, hist, timeout) {
	case porcupine.Ok:
		return true, len(hist), ""
	case porcupine.Unknown:
		return false, len(hist), "timed out"
	}
	_, li := porcupine.CheckOperationsVerbose(fencedModel, hist, timeout/10)
	return false, len(hist), illegalInfo(hist, li)
}

// fencedInput is an op on the fenced register, as the worker sent it.
type fencedInput struct {
	Read  bool
	Raise bool // an admitted read raises the mark (history.Event.Raise)
	Blind bool // a read whose value is not known (history.Event.Blind)
	Tok   uint64
	Value int64 // the value written (writes only)
}

// fencedOutput is the register's reply; Result "" means unknown (pending).
type fencedOutput struct {
	Result string // "ok", "stale" or ""
	Value  int64  // the value read (reads with Result "ok")
}

// fencedState is the register: the highest token admitted and the value.
type fencedState struct {
	Mark  uint64
	Value int64
}

// fencedMeta names an op in reports.
type fencedMeta struct {
	Span      string // the grant's key
	Call, Ret int64
}

// fencedOps converts workload's fenced ops with a token to porcupine
// operations. A pending op (outcome unknown) gets output "" and the
// earliest return that loses no behaviour of it (see pendingReturns).
func fencedOps(workload string, events []history.Event) []porcupine.Operation {
	var hist []porcupine.Operation
	for _, e := range events {
		if e.Kind != history.Op || e.Reg != history.Fenced || e.Workload != workload || e.Tok == 0 || e.Result == history.Unsent {
			continue // an op that never reached the register did nothing
		}
		in := fencedInput{Read: e.Read, Raise: e.Read && e.Raise, Blind: e.Read && e.Blind, Tok: e.Tok}
		if !e.Read {
			in.Value = e.Value
		}
		out := fencedOutput{Result: e.Result}
		if e.Read && e.Result == "ok" {
			out.Value = e.Value
		}
		if e.Ret == 0 || (e.Result != "ok" && e.Result != "stale") {
			out = fencedOutput{}
		}
		hist = append(hist, porcupine.Operation{
			ClientId: e.W,
			Input:    in,
			Call:     e.Call,
			Output:   out,
			Return:   e.Ret,
			Metadata: fencedMeta{Span: SpanKey(e.W, e.Workload, e.G), Call: e.Call, Ret: e.Ret},
		})
	}
	pendingReturns(hist)
	return hist
}

// pendingReturns sets the return of each pending op (Output.Result "") in
// hist. Such an op may take effect at any instant after its Call, or
// never; a return at infinity says exactly that, but leaves porcupine
// free to place it anywhere later, and a search that must exhaust the
// placements (a history that is not linearizable) tries them all, in
// every combination. So each gets the earliest return that changes no
// verdict:
//
//   - A read changes nothing and the model accepts any value it read: it
//     returns at its Call (there is always room for it there). A read that
//     raises the mark (Raise) changes only the mark: once an op admitted
//     with its token or a higher one (or refused with its token or a
//     higher one) has returned, it is a no-op wherever it is placed, and
//     it returns at the earliest such return (or its own Call).
//   - A write of tok: once an op O has shown the mark above tok (a write
//     of a higher token admitted, or an op of tok or higher refused), the
//     write is refused wherever it is placed, as if it never arrived. It
//     returns at O's Ret (or its own Call, if later), the earliest such;
//     placed just after O it is that no-op, so "never" is kept. With no
//     such O it returns after every other op.
func pendingReturns(hist []porcupine.Operation) {
	type mark struct {
		tok uint64
		ret int64
	}
	var admitted, refused []mark // completed ok writes; completed stale ops
	for _, op := range hist {
		in, out := op.Input.(fencedInput), op.Output.(fencedOutput)
		switch {
		case out.Result == "ok" && (!in.Read || in.Raise):
			admitted = append(admitted, mark{in.Tok, op.Return})
		case out.Result == "stale":
			refused = append(refused, mark{in.Tok, op.Return})
		}
	}
	// earliest returns the least ret among marks with tok >= from.
	earliest := func(marks []mark) func(from uint64) int64 {
		slices.SortFunc(marks, func(a, b mark) int { return cmp.Compare(a.tok, b.tok) })
		least := make([]int64, len(marks)+1) // least[i]: min ret of marks[i:]
		least[len(marks)] = math.MaxInt64
		for i := len(marks) - 1; i >= 0; i-- {
			least[i] = min(least[i+1], marks[i].ret)
		}
		return func(from uint64) int64 {
			i, _ := slices.BinarySearchFunc(marks, from, func(m mark, t uint64) int { return cmp.Compare(m.tok, t) })
			return least[i]
		}
	}
	higherAdmitted, refusedAtLeast := earliest(admitted), earliest(refused)
	for i, op := range hist {
		if op.Output.(fencedOutput).Result != "" {
			continue
		}
		in := op.Input.(fencedInput)
		ret := op.Call
		switch {
		case !in.Read:
			ret = max(op.Call, min(higherAdmitted(in.Tok+1), refusedAtLeast(in.Tok)))
		case in.Raise:
			// It may have raised the mark to tok, and does nothing once
			// an op admitted with tok or higher has.
			ret = max(op.Call, min(higherAdmitted(in.Tok), refusedAtLeast(in.Tok)))
		}
		hist[i].Return = ret
	}
}

// fencedModel is the fenced register under the guard's rule (tok >= mark
// is admitted; a write raises the mark), see Linearizable.
var fencedModel = porcupine.Model{
	Init: func() any { return fencedState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(fencedState), input.(fencedInput), output.(fencedOutput)
		stale := in.Tok < s.Mark
		next := s
		switch {
		case !stale && !in.Read:
			next = fencedState{Mark: in.Tok, Value: in.Value}
		case !stale && in.Raise:
			next.Mark = in.Tok
		}
		switch out.Result {
		case "":
			return true, next
		case "stale":
			return stale, s
		case "ok":
			if stale {
				return false, s
			}
			if in.Read {
				return in.Blind || out.Value == s.Value, next
			}
			return true, next
		}
		return false, s
	},
	Hash: func(state any) uint64 {
		s := state.(fencedState)
		return s.Mark*0x9e3779b97f4a7c15 ^ uint64(s.Value)
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(fencedInput), output.(fencedOutput)
		res := out.Result
		switch {
		case res == "":
			res = "unknown"
		case res == "ok" && in.Read && !in.Blind:
			res = fmt.Sprintf("ok %d", out.Value)
		}
		if in.Read {
			return fmt.Sprintf("read(tok %d) -> %s", in.Tok, res)
		}
		return fmt.Sprintf("write(tok %d, %d) -> %s", in.Tok, in.Value, res)
	},
	DescribeState: func(state any) string {
		s := state.(fencedState)
		return fmt.Sprintf("mark %d value %d", s.Mark, s.Value)
	},
}

// illegalInfo says where porcupine's search stopped: the longest order it
// found, the state it reached, and the first ops (by Call) that could not
// follow it.
func illegalInfo(hist []porcupine.Operation, li porcupine.LinearizationInfo) string {
	var longest []int
	for _, part := range li.PartialLinearizations() {
		for _, l := range part {
			if len(l) > len(longest) {
				longest = l
			}
		}
	}
	state := fencedModel.Init()
	placed := make(map[int]bool, len(longest))
	for _, id := range longest {
		_, state = fencedModel.Step(state, hist[id].Input, hist[id].Output)
		placed[id] = true
	}
	var rest []int
	for id := range hist {
		if !placed[id] {
			rest = append(rest, id)
		}
	}
	slices.SortFunc(rest, func(a, b int) int { return cmp.Compare(hist[a].Call, hist[b].Call) })
	var b strings.Builder
	fmt.Fprintf(&b, "not linearizable: %d of %d ops ordered, reaching %s; none of the next can follow:",
		len(longest), len(hist), fencedModel.DescribeState(state))
	for _, id := range rest[:min(len(rest), 3)] {
		op := hist[id]
		m := op.Metadata.(fencedMeta)
		ret := "no reply"
		if m.Ret != 0 {
			ret = hms(m.Ret)
		}
		fmt.Fprintf(&b, "\n  %s %s [%s, %s]", m.Span, fencedModel.DescribeOperation(op.Input, op.Output), hms(m.Call), ret)
	}
	return b.String()
}

// StaleAdmitted returns the resource's Write records (in log order, the
// order it applied them) whose token is below the highest token admitted
// before for the same lock: the fenced guard let a stale holder in. An
// equal token is fine (one holder writes many times).
//
// Cost: O(n) for n records.
func StaleAdmitted(records []history.Record) []history.Record {
	mark := make(map[string]uint64)
	var out []history.Record
	for _, r := range records {
		if r.Kind != history.Write {
			continue
		}
		if r.Tok < mark[r.Lock] {
			out = append(out, r)
			continue
		}
		mark[r.Lock] = r.Tok
	}
	return out
}

// DoubleGrants returns the unfenced register's evidence of double grants,
// one record each: the first Overlap record of each pair of holders (the
// resource writes one per section that overlapped, so a pair that stayed
// overlapped for several sections counts once, whichever way round) and
// every LostUpdate.
func DoubleGrants(records []history.Record) []history.Record {
	var out []history.Record
	seen := make(map[[3]string]bool)
	for _, r := range records {
		switch r.Kind {
		case history.Overlap:
			pair := [3]string{r.Lock, min(r.A, r.B), max(r.A, r.B)}
			if !seen[pair] {
				seen[pair] = true
				out = append(out, r)
			}
		case history.LostUpdate:
			out = append(out, r)
		}
	}
	return out
}
