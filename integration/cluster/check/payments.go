package check

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/integration/cluster/history"
)

// PaymentsRow is a payments workload's line of the table: the orders its
// holders started (claimed through the intent journal), and what its
// payment API charged, after the run's final pass.
type PaymentsRow struct {
	Workload    string
	Started     int // orders with an intent record
	Open        int // of those, intents still open at the end
	Charges     int // the API's charges (effects)
	MinEffects  int // the fewest charges of a started order
	MaxEffects  int // the most
	Duplicates  int // started orders charged more than once
	Lost        int // started orders never charged
	Stray       int // charges of an order nobody started
	StaleStarts int // intents first written by a holder whose grant had ended or been superseded
}

// paymentsPromise is what a payments workload must show: the journal
// with keys and Pending charges each order once; without keys it still
// charges each at least once (Pending), without Pending still at most
// once (keys); with a window shorter than the pauses at least once.
// What a workload does not promise is measured: the controls' duplicates
// or losses, and the short window's duplicates, which are the journal's
// documented limit.
func paymentsPromise(wl string) (atMostOnce, atLeastOnce bool) {
	switch wl {
	case history.PaymentsNoKeys, history.PaymentsShort:
		return false, true
	case history.PaymentsNoPending:
		return true, false
	}
	return true, true
}

// started is an order's intent as the journal's history shows it.
type started struct {
	op    string
	order int64
	seq   uint64 // the token that first wrote it
	rev   int64  // the revision it was first written at
	done  bool   // its outcome recorded (the last write's)
}

// paymentsDir is where a run's payments artifacts are (env.PaymentsDir).
const paymentsDir = "payments"

// checkPayments checks the run's payments workloads from the payment
// APIs' audits and etcd's history (env.SettlePayments wrote both after the
// final pass), and adds their rows.
func (r *Result) checkPayments(s Settings) {
	kvs, err := history.ReadLines[history.KV](filepath.Join(s.Dir, paymentsDir, "etcd.jsonl"))
	if err != nil {
		r.Failures = append(r.Failures, "payments: no history of etcd's keyspace, so no intent is known: "+err.Error())
	}
	events, err := history.ReadWorkers(filepath.Join(s.Dir, "history"))
	if err != nil {
		r.Notes = append(r.Notes, "payments: the workers' histories: "+err.Error())
	}
	for _, wl := range s.Workloads {
		if !history.IsPayments(wl) {
			continue
		}
		charges, err := history.ReadLines[history.Charge](filepath.Join(s.Dir, paymentsDir, wl+".audit.jsonl"))
		if err != nil {
			r.Failures = append(r.Failures, fmt.Sprintf("%s: no audit of the payment API's charges: %v", wl, err))
		}
		r.Payments = append(r.Payments, r.paymentsWorkload(wl, kvs, charges, grantsByToken(events, wl)))
	}
}

// grantsByToken names wl's grants by token ("w3/payments-journal#5"), for
// the reports.
func grantsByToken(events []history.Event, wl string) map[uint64]string {
	out := map[uint64]string{}
	for _, e := range events {
		if e.Kind == history.Grant && e.Workload == wl {
			out[e.Tok] = SpanKey(e.W, e.Workload, e.G)
		}
	}
	return out
}

// paymentsWorkload counts wl's orders and their charges, and judges them
// by what wl promises.
func (r *Result) paymentsWorkload(wl string, kvs []history.KV, charges []history.Charge, grants map[uint64]string) PaymentsRow {
	row := PaymentsRow{Workload: wl, Charges: len(charges)}
	ops, stale := intents("dlock-"+wl, kvs)
	row.Started, row.StaleStarts = len(ops), len(stale)
	for i, st := range stale {
		if i == 3 {
			r.Failures = append(r.Failures, fmt.Sprintf("%s: ... and %d more stale starts", wl, len(stale)-3))
			break
		}
		r.Failures = append(r.Failures, wl+": "+st.describe(grants))
	}
	byOrder := map[int64][]history.Charge{}
	for _, c := range charges {
		byOrder[c.Order] = append(byOrder[c.Order], c)
	}
	atMostOnce, atLeastOnce := paymentsPromise(wl)
	orders := map[int64]bool{}
	var dups, lost, stray []string
	for i, op := range ops {
		orders[op.order] = true
		cs := byOrder[op.order]
		if !op.done {
			row.Open++
		}
		if i == 0 || len(cs) < row.MinEffects {
			row.MinEffects = len(cs)
		}
		row.MaxEffects = max(row.MaxEffects, len(cs))
		switch {
		case len(cs) > 1:
			row.Duplicates++
			dups = append(dups, fmt.Sprintf("order %d charged %d times: %s", op.order, len(cs), describeCharges(cs)))
		case len(cs) == 0:
			row.Lost++
			lost = append(lost, fmt.Sprintf("%s started by tok %d%s at revision %d, never charged (its intent %s)",
				op.op, op.seq, grantName(grants, op.seq), op.rev, map[bool]string{true: "done", false: "open"}[op.done]))
		}
	}
	for _, c := range charges {
		if !orders[c.Order] {
			row.Stray++
			stray = append(stray, fmt.Sprintf("%s of order %d at %s (key %q), which no holder started", c.ID, c.Order, clock(c.T), c.Key))
		}
	}
	switch {
	case atMostOnce:
		r.Failures = append(r.Failures, listed(wl+": duplicate", dups)...)
	case row.Duplicates > 0 && wl == history.PaymentsShort:
		r.Notes = append(r.Notes, fmt.Sprintf("%s: %d orders charged more than once: retries after the payment API's window had passed (the journal's documented limit)", wl, row.Duplicates))
	case row.Duplicates > 0:
		r.Notes = append(r.Notes, fmt.Sprintf("%s: %d orders charged more than once (the control without keys)", wl, row.Duplicates))
	}
	switch {
	case atLeastOnce:
		r.Failures = append(r.Failures, listed(wl+": lost", lost)...)
	case row.Lost > 0:
		r.Notes = append(r.Notes, fmt.Sprintf("%s: %d orders claimed and never charged (the control without Pending)", wl, row.Lost))
	}
	r.Failures = append(r.Failures, listed(wl+": stray charge", stray)...)
	if row.Started == 0 {
		r.Failures = append(r.Failures, wl+": no order started: the workload did nothing")
	}
	return row
}

// grantName returns " (<span key>)" for the grant of tok, or "".
func grantName(grants map[uint64]string, tok uint64) string {
	if g, ok := grants[tok]; ok {
		return " (" + g + ")"
	}
	return ""
}

// describeCharges lists charges: ID, time, key.
func describeCharges(cs []history.Charge) string {
	var out []string
	for _, c := range cs {
		key := "no key"
		if c.Key != "" {
			key = "key " + strconv.Quote(c.Key)
		}
		out = append(out, fmt.Sprintf("%s at %s (%s)", c.ID, clock(c.T), key))
	}
	return strings.Join(out, ", ")
}

// staleStart is an intent first written by a holder whose grant was over
// by then: its grant's key deleted (its session expired, or a release),
// or the journal's mark above its token (a later holder had written).
type staleStart struct {
	Op      string
	Seq     uint64 // the writer's token
	Rev     int64  // the revision it was first written at
	Deleted int64  // when the grant's key was deleted (0: it was not; -1: no such grant)
	Mark    uint64 // the mark then, when above Seq (else 0)
	MarkRev int64  // when the mark was set
}

func (s staleStart) describe(grants map[uint64]string) string {
	var why []string
	switch {
	case s.Deleted < 0:
		why = append(why, "no grant of the lock has that token")
	case s.Deleted > 0:
		why = append(why, fmt.Sprintf("after its grant's key was deleted (revision %d)", s.Deleted))
	}
	if s.Mark > 0 {
		why = append(why, fmt.Sprintf("while the journal's mark was %d (since revision %d): a later holder had written", s.Mark, s.MarkRev))
	}
	return fmt.Sprintf("stale start: intent %s first written by tok %d%s at revision %d, %s",
		s.Op, s.Seq, grantName(grants, s.Seq), s.Rev, strings.Join(why, ", and "))
}

// intents reads the intent journal of lock name (package intent's etcd
// layout, beside the lock's queue under "dlock/lock") from the keyspace's
// history kvs (in revision order), and returns the orders started, in the
// order their intents were first written, and the stale starts among
// them: an intent first written at revision R by a token whose grant's
// key (the queue key created at that revision) was deleted before R, or
// while the journal's mark was above the token. The store's fence (the
// Txn that writes an intent compares the grant's ownership and the mark)
// makes both impossible; the plant unfenced-intent removes it.
//
// Cost: O(n) in the history's events.
func intents(name string, kvs []history.KV) (ops []started, stale []staleStart) {
	esc := strings.ReplaceAll(name, "/", "%2F")
	queue := "dlock/lock/" + esc + "/"
	dir := "dlock/lock/" + esc + "!intent/"
	var (
		holders = map[int64]int64{}  // the queue's keys by create revision (a grant's token): their deletion (0: none)
		live    = map[string]int64{} // a queue key's current create revision
		mark    uint64
		markRev int64
		at      = map[string]int{} // an op's key: its index in ops
	)
	for i := 0; i < len(kvs); {
		rev := kvs[i].Rev
		j := i
		for j < len(kvs) && kvs[j].Rev == rev {
			j++
		}
		group := kvs[i:j]
		// Judge the intents this revision creates against the state
		// before it (their Txn compared that state), then apply it.
		for _, kv := range group {
			op, isOp := strings.CutPrefix(kv.Key, dir+"op/")
			if !isOp {
				continue
			}
			if kv.Del {
				delete(at, kv.Key)
				continue
			}
			var rec struct {
				Op   string `json:"op"`
				Seq  uint64 `json:"seq"`
				Done bool   `json:"done"`
			}
			if err := json.Unmarshal([]byte(kv.Value), &rec); err != nil {
				rec.Op = op // unreadable: counted, not judged
			}
			if k, ok := at[kv.Key]; ok {
				ops[k].done = rec.Done
				continue
			}
			order, _ := strconv.ParseInt(strings.TrimPrefix(rec.Op, "charge/order-"), 10, 64)
			at[kv.Key] = len(ops)
			ops = append(ops, started{op: rec.Op, order: order, seq: rec.Seq, rev: rev, done: rec.Done})
			st := staleStart{Op: rec.Op, Seq: rec.Seq, Rev: rev}
			if del, ok := holders[int64(rec.Seq)]; !ok {
				st.Deleted = -1
			} else {
				st.Deleted = del
			}
			if mark > rec.Seq {
				st.Mark, st.MarkRev = mark, markRev
			}
			if st.Deleted != 0 || st.Mark != 0 {
				stale = append(stale, st)
			}
		}
		for _, kv := range group {
			switch {
			case kv.Key == dir+"mark" && !kv.Del:
				mark, _ = strconv.ParseUint(kv.Value, 10, 64)
				markRev = rev
			case strings.HasPrefix(kv.Key, queue) && kv.Del:
				if c, ok := live[kv.Key]; ok {
					holders[c] = rev
					delete(live, kv.Key)
				}
			case strings.HasPrefix(kv.Key, queue) && kv.Create == rev:
				holders[rev] = 0
				live[kv.Key] = rev
			}
		}
		i = j
	}
	return ops, stale
}

// PaymentsTable renders the payments rows as a markdown table.
func PaymentsTable(rows []PaymentsRow) string {
	var b strings.Builder
	b.WriteString("| workload | orders started | charges | effects per order min/max | duplicates | lost | stray | stale starts | open at the end |\n")
	b.WriteString("|---|---:|---:|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %d / %d | %d | %d | %d | %d | %d |\n",
			r.Workload, r.Started, r.Charges, r.MinEffects, r.MaxEffects, r.Duplicates, r.Lost, r.Stray, r.StaleStarts, r.Open)
	}
	return b.String()
}
