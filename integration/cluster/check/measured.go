package check

import (
	"github.com/dlock-go/dlock/integration/cluster/history"
)

// fencedResults counts workload's fenced ops by result ("ok", "stale",
// "error").
func fencedResults(wl string, events []history.Event) map[string]int {
	out := map[string]int{}
	for _, e := range events {
		if e.Kind == history.Op && e.Reg == history.Fenced && e.Workload == wl {
			out[e.Result]++
		}
	}
	return out
}

// lateOps counts, by register and result, the ops of workload's grants
// sent after the grant's local validity had run out (a span's Deadline):
// a holder that resumed from a pause acting before it looked at Done.
func lateOps(wl string, spans []Span, events []history.Event) map[string]map[string]int {
	deadline := map[string]int64{}
	for _, s := range spans {
		if s.Deadline > 0 {
			deadline[s.Key] = s.Deadline
		}
	}
	out := map[string]map[string]int{history.Fenced: {}, history.Unfenced: {}}
	for _, e := range events {
		if e.Kind != history.Op || e.Workload != wl {
			continue
		}
		if dl, ok := deadline[SpanKey(e.W, e.Workload, e.G)]; ok && e.Call > dl {
			out[e.Reg][e.Result]++
		}
	}
	return out
}
