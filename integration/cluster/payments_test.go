package cluster

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/check"
	"github.com/dlock-go/dlock/integration/cluster/env"
	"github.com/dlock-go/dlock/integration/cluster/fault"
	"github.com/dlock-go/dlock/integration/cluster/history"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestPayments runs the payments workloads side by side (an intent
// journal in front of a payment API that deduplicates by key, and its
// controls) under worker kills and pauses at each step of a charge, a
// holder paused before its next order, and member kills, each class
// twice. With the journal, keys and Pending, every order started is
// charged exactly once; each control fails at what it lacks (without keys
// some order is charged twice, without Pending some order is never
// charged); and at a payment API whose window is shorter than the pauses
// the journal lets duplicates through: its documented limit, counted, not
// a failure. No intent may be started by a holder whose grant had ended
// (the stale start check; TestPlanted's unfenced-intent shows it fail).
func TestPayments(t *testing.T) {
	testenv.SkipUnlessLong(t, "~3 min: the intent journal in front of a payment API, and its controls, under worker kills and pauses")
	env.Need(t)
	// Not parallel: it runs first, alone, so that its dozen processes do
	// not slow the other runs' nemesis, whose pause-use must land inside
	// a holder's 5–20 ms section.
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	classes := append(slices.Clone(fault.PaymentsClasses), "pause-use", "kill")
	ttl := 3 * time.Second
	rep := runCluster(t, ctx, env.Config{
		Seed: seed(t, 20261208), TTL: ttl, Workloads: history.PaymentsWorkloads, PerWorkload: 2,
		Classes: classes, Faults: 2 * len(classes), Gap: 2 * ttl,
	})
	verdict(t, rep)
	t.Logf("payments (seed %d, %d faults):\n%s", rep.Seed, len(rep.Faults), check.PaymentsTable(rep.Payments))
	rows := map[string]check.PaymentsRow{}
	for _, r := range rep.Payments {
		rows[r.Workload] = r
		if r.Started == 0 {
			t.Errorf("%s: no order started", r.Workload)
		}
	}
	if r := rows[history.PaymentsJournal]; r.Duplicates != 0 || r.Lost != 0 {
		t.Errorf("the journal: %d duplicates, %d lost; want none", r.Duplicates, r.Lost)
	}
	if r := rows[history.PaymentsNoKeys]; r.Duplicates == 0 {
		t.Errorf("the control without keys charged no order twice: the run is too gentle to count")
	}
	if r := rows[history.PaymentsNoPending]; r.Lost == 0 {
		t.Errorf("the control without Pending lost no order: the run is too gentle to count")
	}
	r := rows[history.PaymentsShort]
	if r.Duplicates == 0 {
		t.Errorf("the payment API with a short window let no duplicate through: the limit was not shown")
	}
	t.Logf("the documented limit: %d of %d orders charged more than once at a payment API that keeps keys for less than a pause", r.Duplicates, r.Started)
}
