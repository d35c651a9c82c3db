package check

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/dlock-go/dlock/integration/cluster/history"
)

// Control is a guard run's control on the real resource, for one
// workload: a counter beside the fenced register, read and then written
// (read + 1) without the guard by each exclusive critical section.
type Control struct {
	Workload string
	Acked    int   // increments acknowledged
	Unknown  int   // increments with no reply (they may have landed)
	Final    int64 // the counter's value at the end (it starts at 0); -1 for http
	// (whose control is the resource's unfenced register, and Lost the
	// lost updates it recorded)
	// Lost is Acked − Final when positive: acknowledged increments that
	// another holder's write overwrote (a lower bound: an increment whose
	// reply was lost may have landed and hidden one).
	Lost int
}

// checkAudit checks what a guard run's resource recorded (audit: the
// guard's committed writes, in commit order; control.json: the control's
// counters) against the workers' ops, and counts the control's lost
// updates.
//
// The guard's promise for a fenced write: it commits only if its token
// was admitted, and its audit row with it. A write the worker was told
// was refused ("stale") must not be in the audit; an acknowledged one
// ("ok") must be (the server may have been killed since: the commit is
// durable); one whose reply never came (a cut, a stall, a kill) may be
// either, and the checker says which.
func (rep *Result) checkAudit(cfg Settings, events []history.Event, audit, records []history.Record) {
	t := tallyGuard(events, audit)
	rep.judgeGuardWrites(cfg, t, len(audit))
	if cfg.Guard == "http" || cfg.Guard == "grpc" {
		rep.memoryControls(cfg, events, records)
		return
	}
	rep.counterControls(cfg, t)
}

// guardWrite is one fenced write's value, as the workers sent it and the
// audit recorded it.
type guardWrite struct {
	lock  string
	tok   uint64
	value int64
}

// guardCount counts a fenced write's replies by kind, and its commits.
type guardCount struct{ ok, unknown, stale, audit int }

// guardTally is what the workers' ops and the guard's audit say: each
// fenced write's counts, and per workload the control's increments
// acknowledged and without reply.
type guardTally struct {
	writes         map[guardWrite]*guardCount
	acked, unknown map[string]int
}

// tallyGuard counts the workers' writes (fenced and control) by reply,
// and the audit's commits.
func tallyGuard(events []history.Event, audit []history.Record) guardTally {
	t := guardTally{writes: map[guardWrite]*guardCount{}, acked: map[string]int{}, unknown: map[string]int{}}
	at := func(k guardWrite) *guardCount {
		c := t.writes[k]
		if c == nil {
			c = &guardCount{}
			t.writes[k] = c
		}
		return c
	}
	for _, e := range events {
		if e.Kind != history.Op || e.Read {
			continue
		}
		switch e.Reg {
		case history.Fenced:
			c := at(guardWrite{"dlock-" + e.Workload, e.Tok, e.Value})
			switch {
			case e.Result == "ok":
				c.ok++
			case e.Result == "stale" || e.Result == history.Unsent:
				c.stale++ // must not commit
			default:
				c.unknown++
			}
		case history.Control:
			switch e.Result {
			case "ok":
				t.acked[e.Workload]++
			case history.Unsent:
			default:
				t.unknown[e.Workload]++
			}
		}
	}
	for _, r := range audit {
		at(guardWrite{r.Lock, r.Tok, r.Value}).audit++
	}
	return t
}

// judgeGuardWrites fails the run on a refused write committed, a
// committed write nobody sent and an acknowledged write lost, and notes
// the counts (committed: the audit's rows).
func (rep *Result) judgeGuardWrites(cfg Settings, t guardTally, committed int) {
	var refused, missing, nobody []string
	unknownWrites, unknownCommitted, refusedWrites := 0, 0, 0
	for k, c := range t.writes {
		what := fmt.Sprintf("%s tok %d value %d", k.lock, k.tok, k.value)
		switch {
		case c.audit > c.ok+c.unknown && c.stale > 0:
			refused = append(refused, fmt.Sprintf("%s: committed %d times, told refused (or unsent) %d times", what, c.audit, c.stale))
		case c.audit > c.ok+c.unknown:
			nobody = append(nobody, fmt.Sprintf("%s: committed %d times, sent %d times", what, c.audit, c.ok+c.unknown))
		case c.audit < c.ok:
			missing = append(missing, fmt.Sprintf("%s: acknowledged %d times, committed %d times", what, c.ok, c.audit))
		}
		unknownWrites += c.unknown
		refusedWrites += c.stale
		unknownCommitted += min(c.unknown, max(0, c.audit-c.ok))
	}
	slices.Sort(refused)
	slices.Sort(nobody)
	slices.Sort(missing)
	rep.Failures = append(rep.Failures, listed("guard: a write the guard refused was committed", refused)...)
	rep.Failures = append(rep.Failures, listed("guard: a committed write no worker sent", nobody)...)
	rep.Failures = append(rep.Failures, listed("guard: an acknowledged write is not in the resource (lost)", missing)...)
	rep.Notes = append(rep.Notes, fmt.Sprintf("guard %s: %d fenced writes committed, %d refused or unsent; %d had no reply, of which %d committed", cfg.Guard, committed, refusedWrites, unknownWrites, unknownCommitted))
}

// memoryControls reads the controls of a guard whose control is the
// resource's unfenced register ("http", "grpc"): their lost updates are
// the resource's records of them.
func (rep *Result) memoryControls(cfg Settings, events []history.Event, records []history.Record) {
	for _, wl := range cfg.Workloads {
		if !fencedWorkload(wl) {
			continue
		}
		c := Control{Workload: wl, Final: -1}
		for _, e := range events {
			if e.Kind == history.Op && e.Reg == history.Unfenced && !e.Read && e.Workload == wl {
				if e.Result == "ok" {
					c.Acked++
				} else {
					c.Unknown++
				}
			}
		}
		for _, r := range records {
			if r.Kind == history.LostUpdate && r.Lock == "dlock-"+wl {
				c.Lost++
			}
		}
		rep.Controls = append(rep.Controls, c)
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s: the control (the resource's unfenced register): %d writes acknowledged, %d without reply: %d lost updates recorded",
			wl, c.Acked, c.Unknown, c.Lost))
	}
}

// counterControls reads the controls of a guard whose control is a
// counter on the resource (control.json): an acknowledged increment the
// final count lacks was lost.
func (rep *Result) counterControls(cfg Settings, t guardTally) {
	finals := map[string]int64{}
	b, err := os.ReadFile(filepath.Join(cfg.Dir, "control.json"))
	if err == nil {
		err = json.Unmarshal(b, &finals)
	}
	if err != nil {
		rep.Failures = append(rep.Failures, "guard: cannot read the control's counters: "+err.Error())
		return
	}
	for _, wl := range cfg.Workloads {
		if !fencedWorkload(wl) {
			continue
		}
		c := Control{Workload: wl, Acked: t.acked[wl], Unknown: t.unknown[wl], Final: finals["dlock-"+wl]}
		c.Lost = max(0, c.Acked-int(c.Final))
		rep.Controls = append(rep.Controls, c)
		rep.Notes = append(rep.Notes, fmt.Sprintf("%s: the control on %s (no guard): %d increments acknowledged, %d without reply, counter at %d: %d lost updates",
			wl, cfg.Guard, c.Acked, c.Unknown, c.Final, c.Lost))
	}
}
