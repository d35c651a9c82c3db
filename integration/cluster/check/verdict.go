package check

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/history"
)

// Result is what the checkers found in a run.
type Result struct {
	Rows     []Row
	ByClass  []Row         // the same figures per backend and fault class
	Failures []string      // each a checker's verdict; empty: the run passed
	Notes    []string      // observations that are not failures
	Exempted []string      // every excused violation, with its evidence
	Controls []Control     // a guard run's control on the real resource, per fenced workload
	Payments []PaymentsRow // the payments workloads' (payments.go)
}

// Settings is what the checkers need to know of a run.
type Settings struct {
	Dir           string          // the run's artifacts
	Faults        []history.Fault // its schedule
	Workloads     []string
	Permits       int    // the semaphore's
	Guard         string // the guard in front of the resource ("": none)
	Measured      bool   // a Redis run: the lock's own violations are noted, not failures
	RecoveryBound time.Duration
	End           int64 // when faults stopped (Unix ns); grants after it are not judged
	SlowClocks    []int // the workers that ran on a slow clock
}

// Row is one workload's line of the table.
type Row struct {
	Workload    string // or, in ByClass, the backend ("etcd", "redis", "redlock")
	Class       string // ByClass only: the fault class
	Grants      int
	Double      int    // double grants the unfenced control saw (overlaps and lost updates at the resource)
	Stale       int    // stale writes the fenced register admitted
	Linear      string // the fenced register's linearizability: "ok (N ops)" or why not
	DoneAfter   int    // grants made while a predecessor still acted, no fault excusing it
	Exempt      int    // the same, under a fault that excuses it (pauses, slow clocks, etcd's stale-leader revoke)
	Regressions int    // token regressions
	Recovery    []time.Duration
	Acquire     []time.Duration
}

// Check runs every checker over the run's histories (in s.Dir) and fills
// r: the rows (per workload, and per backend and fault class) and the
// verdicts. The payments workloads are judged by what their payment APIs
// charged (checkPayments), not by their grants.
//
// An etcd run fails on every violation. A Redis run (measured) notes the
// lock's own violations instead (Done after a successor, token
// regressions, a fenced register that is not linearizable) and counts
// them: they are what the table measures for backends whose guarantees
// do not exclude them. Every run fails on a stale or tokenless write
// admitted, on no progress after a heal, and on a fault it could not
// inject or heal.
func (r *Result) Check(s Settings) error {
	c, err := r.newChecking(s)
	if err != nil {
		return err
	}
	payments := false
	for _, wl := range s.Workloads {
		if history.IsPayments(wl) {
			payments = true // judged by their effects, not their grants
			continue
		}
		r.Rows = append(r.Rows, c.workload(wl))
	}
	r.ByClass = c.classes.rows
	if payments {
		r.checkPayments(s)
	}
	if s.Guard != "" {
		r.checkAudit(s, c.events, c.audit, c.records)
	}
	return nil
}

// checking is one check of a run: what the histories say, read once,
// and what excuses a violation. Its steps fill rep.
type checking struct {
	rep      *Result
	s        Settings
	end      int64 // grants after it are not judged
	measured bool  // a Redis run: the lock's own violations are noted, not failures
	events   []history.Event
	records  []history.Record // the resource's, and the guard's audit
	audit    []history.Record // what the guard admitted (nil: no guard)
	ex       exemptions
	classes  *byClass
	spans    map[string][]Span
	doubles  []history.Record
	stale    []history.Record
}

// newChecking reads the run's histories and evidence, fails the run on
// the faults it could not inject or heal and on grants numbered twice,
// and returns the check's state.
func (rep *Result) newChecking(s Settings) (*checking, error) {
	c := &checking{rep: rep, s: s, end: s.End, measured: s.Measured}
	if err := c.readHistories(); err != nil {
		return nil, err
	}
	for _, f := range s.Faults {
		if f.Err != "" { // the run did not test what it says
			rep.Failures = append(rep.Failures, fmt.Sprintf("fault %d %s: %s", f.N, f.Class, f.Err))
		}
	}
	c.ex = exemptions{faults: s.Faults, slow: map[int]bool{}}
	if !c.measured {
		c.ex.ev = readEvidence(filepath.Join(s.Dir, "etcd"))
		if c.ex.ev.err != nil {
			rep.Notes = append(rep.Notes, "evidence: "+c.ex.ev.err.Error())
		}
	}
	for _, id := range s.SlowClocks {
		c.ex.slow[id] = true
	}
	c.classes = newByClass(s.Faults)
	numbered := map[string]bool{}
	for _, e := range c.events {
		if k := SpanKey(e.W, e.Workload, e.G); e.Kind == history.Grant {
			if numbered[k] {
				rep.Failures = append(rep.Failures, "history: two grants numbered "+k+": a span would hide one")
			}
			numbered[k] = true
		}
	}
	c.spans = Spans(c.events, s.End)
	c.ex.last = lastOnLease(c.spans)
	c.doubles = DoubleGrants(c.records)
	c.stale = StaleAdmitted(c.records)
	return c, nil
}

// readHistories reads the workers' histories, the resource's log and,
// in a guard run, what the guard admitted.
func (c *checking) readHistories() error {
	dir := c.s.Dir
	var err error
	if c.events, err = history.ReadWorkers(filepath.Join(dir, "history")); err != nil {
		return err
	}
	c.records, err = history.ReadLines[history.Record](filepath.Join(dir, "resource.jsonl"))
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	if c.s.Guard == "http" || c.s.Guard == "grpc" {
		// The resource process is the guarded server: its log is the
		// record of what it admitted.
		for _, r := range c.records {
			if r.Kind == history.Write {
				c.audit = append(c.audit, r)
			}
		}
	} else if c.s.Guard != "" {
		// What the guard admitted: the fenced register's writes (the
		// resource process's log has none).
		if c.audit, err = history.ReadLines[history.Record](filepath.Join(dir, "audit.jsonl")); err != nil {
			c.rep.Failures = append(c.rep.Failures, "guard: no audit of the admitted writes: "+err.Error())
		}
		c.records = append(c.records, c.audit...)
	}
	return nil
}

// verdict fails the run on vs, or in a measured run notes them.
func (c *checking) verdict(vs ...string) {
	if c.measured {
		c.rep.Notes = append(c.rep.Notes, vs...)
	} else {
		c.rep.Failures = append(c.rep.Failures, vs...)
	}
}

// workload checks workload wl's grants and ops and returns its row; it
// adds to the rows per backend and class.
func (c *checking) workload(wl string) Row {
	backend := "etcd"
	if c.measured {
		backend = wl
	}
	at := func(t int64) *Row { return c.classes.row(backend, t) }
	var judged []Span
	for _, s := range c.spans[wl] {
		if s.Grant <= c.end {
			judged = append(judged, s)
			at(s.Grant).Grants++
		}
	}
	row := Row{Workload: wl, Grants: len(judged)}
	if via := grantsBy(judged); len(via) > 0 {
		c.rep.Notes = append(c.rep.Notes, fmt.Sprintf("%s: of %d grants, %s", wl, len(judged), via))
	}
	c.admitted(wl, &row, at)
	c.register(wl, &row)
	c.doneAfter(wl, judged, &row, at)
	c.regressions(wl, judged, &row, at)
	c.timings(wl, judged, backend, &row, at)
	if c.measured {
		c.lateOps(wl, judged)
	}
	return row
}

// admitted counts what the resource admitted that it should not have:
// double grants the unfenced control saw, stale and tokenless writes the
// fenced register took (these fail the run).
func (c *checking) admitted(wl string, row *Row, at func(int64) *Row) {
	lock := "dlock-" + wl
	for _, r := range c.doubles {
		if r.Lock == lock {
			row.Double++
			at(r.T).Double++
		}
	}
	for _, r := range c.stale {
		if r.Lock == lock {
			row.Stale++
			at(r.T).Stale++
			if row.Stale <= 3 {
				c.rep.Failures = append(c.rep.Failures, fmt.Sprintf("%s: fenced register admitted a stale write: tok %d at %s", wl, r.Tok, clock(r.T)))
			}
		}
	}
	for _, r := range c.records {
		if r.Kind == history.Write && r.Lock == lock && r.Tok == 0 {
			row.Stale++
			at(r.T).Stale++
			c.rep.Failures = append(c.rep.Failures, fmt.Sprintf("%s: fenced register admitted a write without a token at %s", wl, clock(r.T)))
		}
	}
	if row.Stale > 3 {
		c.rep.Failures = append(c.rep.Failures, fmt.Sprintf("%s: ... and %d more stale writes admitted", wl, row.Stale-3))
	}
}

// register checks the fenced register's linearizability (for a fenced
// workload), or counts its refusals.
func (c *checking) register(wl string, row *Row) {
	if fencedWorkload(wl) {
		ok, ops, info := Linearizable(wl, c.events)
		row.Linear = fmt.Sprintf("ok (%d ops)", ops)
		if ops == 0 && row.Grants > 0 {
			c.rep.Failures = append(c.rep.Failures, wl+": no fenced operation recorded: the register check saw nothing")
		}
		if !ok {
			row.Linear, _, _ = strings.Cut(info, "\n")
			c.verdict(fmt.Sprintf("%s: fenced register not linearizable (%s, %d operations)", wl, info, ops))
		}
	} else if res := fencedResults(wl, c.events); len(res) > 0 {
		all := res["ok"] + res["stale"] + res["error"]
		row.Linear = fmt.Sprintf("n/a: %d of %d refused", res["stale"], all)
	}
}

// doneAfter judges the grants made while a predecessor still acted. A
// grant beyond capacity is excused when the holders no fault excuses do
// not fill the capacity by themselves.
func (c *checking) doneAfter(wl string, judged []Span, row *Row, at func(int64) *Row) {
	var counted []string
	for _, group := range bySuccessor(DoneAfterSuccessor(wl, judged, c.s.Permits)) {
		var fair []Violation
		for _, v := range group {
			if why := c.ex.of(v); why == "" {
				fair = append(fair, v)
			} else {
				c.rep.Exempted = append(c.rep.Exempted, fmt.Sprintf("%s: %s — %s", wl, v, why))
			}
		}
		capacity := 1
		if wl == "semaphore" {
			capacity = c.s.Permits
		}
		cr := at(group[0].After.Grant)
		if len(fair) < capacity {
			row.Exempt += len(group)
			cr.Exempt += len(group)
			continue
		}
		row.DoneAfter += len(fair)
		row.Exempt += len(group) - len(fair)
		cr.DoneAfter += len(fair)
		cr.Exempt += len(group) - len(fair)
		for _, v := range fair {
			counted = append(counted, v.String())
		}
	}
	c.verdict(listed(wl+": Done after a successor's grant", counted)...)
}

// regressions judges the token regressions among the grants no fault
// excuses, and lists the excused ones with why.
func (c *checking) regressions(wl string, judged []Span, row *Row, at func(int64) *Row) {
	var fair []Span
	for _, s := range judged {
		if c.ex.span(s) == "" {
			fair = append(fair, s)
		}
	}
	var regs []string
	regressed := map[string]bool{}
	for _, v := range TokenRegressions(wl, fair) {
		regs = append(regs, v.String())
		regressed[v.After.Key] = true
		at(v.After.Grant).Regressions++
	}
	row.Regressions = len(regs)
	// The regressions the excused grants make, listed with why.
	for _, v := range TokenRegressions(wl, judged) {
		if regressed[v.After.Key] {
			continue
		}
		why := cmp.Or(c.ex.span(v.Before), c.ex.span(v.After), "an excused grant between them")
		c.rep.Exempted = append(c.rep.Exempted, fmt.Sprintf("%s: %s — %s", wl, v, why))
	}
	c.verdict(listed(wl, regs)...)
}

// timings records the acquires' durations and the recoveries after each
// heal, failing the run on no progress within the recovery bound.
func (c *checking) timings(wl string, judged []Span, backend string, row *Row, at func(int64) *Row) {
	for _, a := range acquires(c.events, wl, c.end) {
		row.Acquire = append(row.Acquire, a.took)
		at(a.granted).Acquire = append(at(a.granted).Acquire, a.took)
	}
	var fails []string
	for i, d := range recovery(wl, judged, c.s.Faults, c.end, c.s.RecoveryBound, &fails) {
		row.Recovery = append(row.Recovery, d)
		cr := c.classes.rowOf(backend, c.s.Faults[i].Class)
		cr.Recovery = append(cr.Recovery, d)
	}
	c.rep.Failures = append(c.rep.Failures, fails...)
}

// lateOps notes the ops sent after their grant's validity ran out (a
// measured run's).
func (c *checking) lateOps(wl string, judged []Span) {
	late := lateOps(wl, judged, c.events)
	c.rep.Notes = append(c.rep.Notes, fmt.Sprintf("%s: ops sent after their grant's validity ran out (e.g. a holder resumed from a pause): unfenced %d admitted, %d no reply; fenced %d admitted, %d refused, %d no reply",
		wl, late[history.Unfenced]["ok"], late[history.Unfenced]["error"], late[history.Fenced]["ok"], late[history.Fenced]["stale"], late[history.Fenced]["error"]))
}

// grantsBy says how many of spans were acquired by a try and by LockAll
// ("" if none was).
func grantsBy(spans []Span) string {
	n := map[string]int{}
	for _, s := range spans {
		n[s.Via]++
	}
	var out []string
	for _, v := range []string{"try", "all"} {
		if n[v] > 0 {
			out = append(out, fmt.Sprintf("%d by %s", n[v], map[string]string{"try": "a try", "all": "LockAll"}[v]))
		}
	}
	return strings.Join(out, ", ")
}

// byClass sums a run's figures per backend and fault class: what happened
// from a fault's start until the next fault's is the fault's (its heal and
// the quiet after it included); what came before the first fault is
// "none".
type byClass struct {
	faults []history.Fault
	rows   []Row
	at     map[[2]string]int
}

func newByClass(faults []history.Fault) *byClass {
	return &byClass{faults: faults, at: map[[2]string]int{}}
}

// row returns the row of backend's fault class at t.
func (b *byClass) row(backend string, t int64) *Row {
	class := "none"
	for _, f := range b.faults {
		if f.Start > t {
			break
		}
		class = f.Class
	}
	return b.rowOf(backend, class)
}

func (b *byClass) rowOf(backend, class string) *Row {
	k := [2]string{backend, class}
	i, ok := b.at[k]
	if !ok {
		i = len(b.rows)
		b.at[k] = i
		b.rows = append(b.rows, Row{Workload: backend, Class: class})
	}
	return &b.rows[i]
}

// bySuccessor groups violations by their later grant, in order.
func bySuccessor(vs []Violation) [][]Violation {
	var out [][]Violation
	at := map[string]int{}
	for _, v := range vs {
		i, ok := at[v.After.Key]
		if !ok {
			i = len(out)
			at[v.After.Key] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], v)
	}
	return out
}

// fencedWorkload tells whether a workload writes the fenced register
// with a token: a semaphore's permits overlap by design, and Redlock has
// none (its Seq 0 is refused by every guard: it writes, and is refused).
func fencedWorkload(wl string) bool { return wl != "semaphore" && wl != "redlock" }

// listed turns violations into verdicts: the first three in full, then a
// count.
func listed(what string, vs []string) []string {
	var out []string
	for i, v := range vs {
		if i == 3 {
			out = append(out, fmt.Sprintf("%s: ... and %d more", what, len(vs)-3))
			break
		}
		out = append(out, what+": "+v)
	}
	return out
}

// recovery checks progress after each heal: when the next fault (or the
// end) comes at least bound after it, the workload must grant within
// bound of the heal (else a failure goes to fails). It returns, by the
// fault's index, the recovery times it saw (heal to the first grant
// before the next fault).
func recovery(wl string, spans []Span, faults []history.Fault, end int64, bound time.Duration, fails *[]string) map[int]time.Duration {
	grants := make([]int64, 0, len(spans))
	for _, s := range spans {
		grants = append(grants, s.Grant)
	}
	slices.Sort(grants)
	rec := map[int]time.Duration{}
	for i, f := range faults {
		next := end
		if i+1 < len(faults) {
			next = faults[i+1].Start
		}
		j := sort.Search(len(grants), func(k int) bool { return grants[k] > f.Heal })
		if j < len(grants) && grants[j] <= next {
			rec[i] = time.Duration(grants[j] - f.Heal)
		}
		if time.Duration(next-f.Heal) < bound {
			continue // the next fault came too soon to judge
		}
		if j == len(grants) || time.Duration(grants[j]-f.Heal) > bound {
			*fails = append(*fails, fmt.Sprintf("%s: no progress: no grant within %v after %s (fault %d) healed at %s", wl, bound, f.Class, f.N, clock(f.Heal)))
		}
	}
	return rec
}

// acquire is one successful acquire: when it was granted, how long it
// took.
type acquire struct {
	granted int64
	took    time.Duration
}

func acquires(events []history.Event, wl string, end int64) []acquire {
	start := map[[2]int]int64{}
	var out []acquire
	for _, e := range events {
		if e.Workload != wl || e.T > end {
			continue
		}
		switch e.Kind {
		case history.Acquire:
			if e.Via != "try" { // a try does not wait: its time is no acquire latency
				start[[2]int{e.W, e.G}] = e.T
			}
		case history.Grant:
			if t, ok := start[[2]int{e.W, e.G}]; ok {
				out = append(out, acquire{granted: e.T, took: time.Duration(e.T - t)})
			}
		}
	}
	return out
}

// exemptions says which violations a fault excuses, by evidence: the
// lock cannot keep a holder from acting while its process is stopped or
// its clock is slow (the token must save the resource then), nor when etcd
// itself revokes a live lease (a leader resumed after a pause longer than
// the TTL, whose lessor still believes it leads).
type exemptions struct {
	faults []history.Fault
	slow   map[int]bool
	ev     evidence
	last   map[int64]string // per lease, the key of the last span granted on it
}

// Excuses returns the exemptions of a run whose artifacts are in dir, as
// the checkers judge them: why violation v is excused ("" if it is not).
// The run's evidence is read once, here; slow clocks are not known.
func Excuses(dir string, faults []history.Fault, spans map[string][]Span) func(v Violation) string {
	ex := exemptions{faults: faults, slow: map[int]bool{}, ev: readEvidence(filepath.Join(dir, "etcd")), last: lastOnLease(spans)}
	return ex.of
}

// ByServer tells whether a grant's or an acquire's error says the server
// took it: its key deleted, or its lease gone (or not found).
func ByServer(err string) bool {
	for _, s := range []string{"key deleted", "lease gone", "lease not found"} {
		if strings.Contains(err, s) {
			return true
		}
	}
	return false
}

// lastOnLease maps each lease to the key of the last span granted on it.
func lastOnLease(spans map[string][]Span) map[int64]string {
	last := map[int64]Span{}
	for _, ss := range spans {
		for _, s := range ss {
			if l, ok := last[s.Lease]; s.Lease != 0 && (!ok || s.Grant > l.Grant) {
				last[s.Lease] = s
			}
		}
	}
	out := make(map[int64]string, len(last))
	for l, s := range last {
		out[l] = s.Key
	}
	return out
}

// revoked returns the evidence that etcd's stale-leader revoke ended s,
// or "": its holder saw the server take it (Done with its key deleted or
// its lease gone, or an Unlock that found them gone: not its own
// release, nor its session's Close, which come after), s is the last
// grant on its lease (the earlier ones ended before the revoke, which
// ended the session), and the lease's first committed revoke came from a
// deposed leader.
func (ex exemptions) revoked(s Span) string {
	if s.Lease == 0 || ex.last[s.Lease] != s.Key || !ByServer(s.Err) && !ByServer(s.ReleaseErr) {
		return ""
	}
	if why := ex.ev.staleRevoke(s.Lease); why != "" {
		return "etcd revoke: " + why
	}
	return ""
}

// of returns why v is excused, with the evidence, or "".
func (ex exemptions) of(v Violation) string {
	b := v.Before
	if ex.slow[b.W] {
		return fmt.Sprintf("slow clock: w%d ran its deadlines at half speed", b.W)
	}
	if why := ex.stopped(b.W, b.Acquire, v.After.Grant); why != "" {
		return why
	}
	if why := ex.revoked(b); why != "" {
		return why
	}
	// The later grant's own key taken: it was ahead in the queue (a lower
	// token), granted at a revision where it was first, and its key was
	// deleted by the revoke before the holder's grant, which a member
	// further along told its client first (campaign c3: 8 ms apart).
	if a := v.After; a.Tok != 0 && a.Tok < b.Tok {
		if why := ex.revoked(a); why != "" {
			return "the later grant's own: " + why
		}
	}
	return ""
}

// stopped returns the evidence that worker w was stopped (SIGSTOP, then
// SIGCONT) at some moment of [from, to], or "".
func (ex exemptions) stopped(w int, from, to int64) string {
	for _, f := range ex.faults {
		if strings.HasPrefix(f.Class, "pause-") && slices.Contains(f.Workers, w) && f.Stopped != 0 && f.Stopped <= to && f.Heal >= from {
			return fmt.Sprintf("paused: w%d stopped from %s to %s (fault %d %s)", w, clock(f.Stopped), clock(f.Heal), f.N, f.Class)
		}
	}
	return ""
}

// span returns why span s is excused from the token order, or "": its
// worker was on a slow clock, or stopped between its acquire and its end
// (a grant stamped late), or etcd's stale-leader revoke took its lease.
func (ex exemptions) span(s Span) string {
	if ex.slow[s.W] {
		return "slow clock"
	}
	if why := ex.stopped(s.W, s.Acquire, s.EffectiveEnd); why != "" {
		return why
	}
	return ex.revoked(s)
}

func clock(ns int64) string { return history.Time(ns).Format("15:04:05.000") }

// Add sums r's counts and recovery times into s.
func (s *Row) Add(r Row) {
	s.Grants += r.Grants
	s.Double += r.Double
	s.Stale += r.Stale
	s.DoneAfter += r.DoneAfter
	s.Exempt += r.Exempt
	s.Regressions += r.Regressions
	s.Recovery = append(s.Recovery, r.Recovery...)
}
