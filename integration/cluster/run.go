package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/check"
	"github.com/dlock-go/dlock/integration/cluster/env"
	"github.com/dlock-go/dlock/integration/cluster/fault"
	"github.com/dlock-go/dlock/integration/cluster/history"
)

// Report is a run's outcome: the table's rows and what failed.
type Report struct {
	Seed         int64
	Dir          string
	Faults       []history.Fault
	check.Result // what the checkers found
}

// Run starts a harness, injects faults for cfg.Duration (or cfg.Faults
// faults), stops the workers, checks the histories and returns the
// report. The artifacts stay in the report's Dir. logf receives progress
// lines.
func Run(ctx context.Context, cfg env.Config, logf func(string, ...any)) (*Report, error) {
	cfg.Defaults()
	if len(cfg.Classes) == 0 {
		cfg.Classes = fault.EtcdClasses
	}
	h, err := env.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	rng := newRNG(cfg.Seed)
	nem := fault.NewNemesis(h, rng, logf)
	r := runner{
		h: h, rng: rng, logf: logf, inject: nem.Inject,
		leftovers: h.Leftovers, store: "etcd", close: h.Close, check: (*Report).check,
	}
	if h.Guard != nil {
		r.collect = h.Guard.Collect
	}
	if cfg.HasPayments() {
		r.settle = func(ctx context.Context) error { return h.SettlePayments(ctx, 4*cfg.TTL+10*time.Second) }
	}
	return r.run(ctx)
}

func newRNG(seed int64) *rand.Rand { return rand.New(rand.NewPCG(uint64(seed), 0x646c6f636b)) }

// runner is the part of a run that every backend shares: the fault loop,
// the stop, the checks of what is left, the record of the run's end.
type runner struct {
	h         *env.Harness
	rng       *rand.Rand // the nemesis' too: one seeded stream
	logf      func(string, ...any)
	inject    func(context.Context, *history.Fault)
	leftovers func(context.Context, time.Duration) ([]string, error)
	store     string // what leftovers reads, for its error
	close     func() error
	check     func(rep *Report, cfg env.Config, end int64, slowClocks []int) error
	collect   func(context.Context) error // reads the guard's resource into the artifacts (nil: no guard)
	settle    func(context.Context) error // ends what workloads leave by design, before the check that nothing is left (nil: none)
}

func (r runner) run(ctx context.Context) (*Report, error) {
	h, cfg := r.h, r.h.Cfg
	if err := writeJSON(filepath.Join(h.Dir, "config.json"), cfg); err != nil {
		return nil, err
	}
	r.logf("cluster up: artifacts in %s; replay with DLOCK_SEED=%d", h.Dir, cfg.Seed)
	// Let every workload grant once before the first fault.
	env.Sleep(ctx, cfg.TTL)
	// With cfg.Faults, each class in turn, in a seeded order; else classes
	// drawn at random until cfg.Duration has passed.
	order := slices.Clone(cfg.Classes)
	r.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var faults []history.Fault
	begin := time.Now()
	for n := 1; ctx.Err() == nil; n++ {
		if cfg.Faults > 0 && n > cfg.Faults || cfg.Faults == 0 && time.Since(begin) >= cfg.Duration {
			break
		}
		f := history.Fault{N: n, Class: cfg.Classes[r.rng.IntN(len(cfg.Classes))]}
		if cfg.Faults > 0 {
			f.Class = order[(n-1)%len(order)]
		}
		r.inject(ctx, &f)
		faults = append(faults, f)
		if err := writeJSON(filepath.Join(h.Dir, "schedule.json"), faults); err != nil {
			return nil, err
		}
		env.Sleep(ctx, cfg.Gap)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	end := time.Now().UnixNano()
	rep := &Report{Seed: cfg.Seed, Dir: h.Dir, Faults: faults}
	for _, err := range h.StopWorkers(2*cfg.TTL + 15*time.Second) {
		rep.Failures = append(rep.Failures, "worker did not stop cleanly: "+err.Error())
	}
	if r.settle != nil {
		if err := r.settle(ctx); err != nil {
			rep.Failures = append(rep.Failures, "payments: "+err.Error())
		}
	}
	left, err := r.leftovers(ctx, 2*cfg.TTL+5*time.Second)
	if err != nil {
		rep.Failures = append(rep.Failures, "nothing left: cannot read "+r.store+": "+err.Error())
	}
	for _, l := range left {
		rep.Failures = append(rep.Failures, "nothing left: "+l)
	}
	if r.collect != nil {
		if err := r.collect(ctx); err != nil {
			rep.Failures = append(rep.Failures, "guard: cannot read the resource: "+err.Error())
		}
	}
	if err := h.Resource.Stop(5 * time.Second); err != nil {
		rep.Failures = append(rep.Failures, "resource: "+err.Error())
	}
	var slowClocks []int
	for _, w := range h.AllWorkers() {
		if w.Rate != 0 && w.Rate < 1 {
			slowClocks = append(slowClocks, w.ID)
		}
	}
	if err := writeJSON(filepath.Join(h.Dir, "end.json"), runEnd{End: end, SlowClocks: slowClocks, Failures: rep.Failures}); err != nil {
		return nil, err
	}
	if err := r.close(); err != nil {
		rep.Notes = append(rep.Notes, "close: "+err.Error())
	}
	if err := r.check(rep, cfg, end, slowClocks); err != nil {
		return rep, err
	}
	return rep, writeReport(rep)
}

// runEnd is what a recheck needs beyond config and schedule.
type runEnd struct {
	End        int64    `json:"end"`                // when faults stopped (Unix ns); grants after it are not judged
	SlowClocks []int    `json:"slow_clocks"`        // workers that ran on a slow clock
	Failures   []string `json:"failures,omitempty"` // what the run itself found before the checkers (a worker that did not stop, a key left): a recheck keeps them
}

// Recheck runs the checkers again on a saved run's artifacts (an etcd
// run's or a Redis run's).
func Recheck(dir string) (*Report, error) {
	cfg, rep, e, err := load(dir)
	if err != nil {
		return nil, err
	}
	if cfg.Redis() {
		cfg.RedisDefaults()
	}
	cfg.Defaults()
	return rep, rep.check(cfg, e.End, e.SlowClocks)
}

// load reads a saved run: its config, schedule and end.
func load(dir string) (env.Config, *Report, runEnd, error) {
	var cfg env.Config
	var faults []history.Fault
	var e runEnd
	for name, v := range map[string]any{"config.json": &cfg, "schedule.json": &faults, "end.json": &e} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return cfg, nil, e, err
		}
		if err := json.Unmarshal(b, v); err != nil {
			return cfg, nil, e, fmt.Errorf("%s: %w", name, err)
		}
	}
	return cfg, &Report{Seed: cfg.Seed, Dir: dir, Faults: faults, Result: check.Result{Failures: slices.Clone(e.Failures)}}, e, nil
}

// check runs the checkers (check.Result.Check) over the run's
// histories, with what they need of cfg, and fills rep's rows and
// verdicts.
func (rep *Report) check(cfg env.Config, end int64, slowClocks []int) error {
	return rep.Result.Check(check.Settings{
		Dir: rep.Dir, Faults: rep.Faults, Workloads: cfg.Workloads, Permits: cfg.Permits, Guard: cfg.Guard,
		Measured: cfg.Redis(), RecoveryBound: cfg.RecoveryBound(), End: end, SlowClocks: slowClocks,
	})
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// writeReport writes the table and the verdicts to report.txt.
func writeReport(rep *Report) error {
	return os.WriteFile(filepath.Join(rep.Dir, "report.txt"), []byte(rep.String()), 0o644)
}

// String renders the report: the table, then failures and notes.
func (rep *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %d faults, artifacts %s\n\n", rep.Seed, len(rep.Faults), rep.Dir)
	if len(rep.Rows) > 0 || len(rep.Payments) == 0 {
		b.WriteString(Table(rep.Rows))
	}
	if len(rep.Payments) > 0 {
		if len(rep.Rows) > 0 {
			b.WriteString("\n")
		}
		b.WriteString("The payments workloads (orders charged through the intent journal):\n\n")
		b.WriteString(check.PaymentsTable(rep.Payments))
	}
	if len(rep.ByClass) > 0 {
		b.WriteString("\nBy fault class (from a fault's start to the next one's):\n\n")
		b.WriteString(ClassTable(rep.ByClass))
	}
	counts := map[string]int{}
	for _, f := range rep.Faults {
		counts[f.Class]++
	}
	var cs []string
	for c, n := range counts {
		cs = append(cs, fmt.Sprintf("%s %d", c, n))
	}
	sort.Strings(cs)
	fmt.Fprintf(&b, "\nfaults: %s\n", strings.Join(cs, ", "))
	for _, f := range rep.Faults {
		if f.Err != "" {
			fmt.Fprintf(&b, "fault %d %s: %s\n", f.N, f.Class, f.Err)
		}
	}
	if len(rep.Failures) == 0 {
		b.WriteString("\nverdict: every checker passed\n")
	} else {
		fmt.Fprintf(&b, "\nverdict: %d failures\n", len(rep.Failures))
		for _, f := range rep.Failures {
			b.WriteString("  " + f + "\n")
		}
	}
	for _, n := range rep.Notes {
		b.WriteString("note: " + n + "\n")
	}
	if len(rep.Exempted) > 0 {
		fmt.Fprintf(&b, "\nexempted (%d), each with its evidence:\n", len(rep.Exempted))
		for _, e := range rep.Exempted {
			b.WriteString("  " + e + "\n")
		}
	}
	return b.String()
}

// Table renders rows as the README's markdown table.
func Table(rows []check.Row) string {
	var b strings.Builder
	b.WriteString("| workload | grants | double grants (unfenced) | stale admitted (fenced) | linearizable | Done after successor: counted (exempt) | token regressions | recovery p50/max | acquire p50/p99 |\n")
	b.WriteString("|---|---:|---:|---:|---|---:|---:|---|---|\n")
	for _, r := range rows {
		lin := r.Linear
		if lin == "" {
			lin = "n/a"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %d (%d) | %d | %s / %s | %s / %s |\n",
			r.Workload, r.Grants, r.Double, r.Stale, lin, r.DoneAfter, r.Exempt, r.Regressions,
			ms(quantile(r.Recovery, 0.5)), ms(quantile(r.Recovery, 1)), ms(quantile(r.Acquire, 0.5)), ms(quantile(r.Acquire, 0.99)))
	}
	return b.String()
}

// ClassTable renders per-class rows (Report.ByClass), sorted by backend
// and class.
func ClassTable(rows []check.Row) string {
	rows = slices.Clone(rows)
	slices.SortStableFunc(rows, func(a, b check.Row) int {
		return cmp.Or(strings.Compare(a.Workload, b.Workload), strings.Compare(a.Class, b.Class))
	})
	var b strings.Builder
	b.WriteString("| backend | fault class | grants | double grants (unfenced) | stale admitted (fenced) | Done after successor: counted (exempt) | token regressions | recovery p50/max | acquire p50/p99 |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d (%d) | %d | %s / %s | %s / %s |\n",
			r.Workload, r.Class, r.Grants, r.Double, r.Stale, r.DoneAfter, r.Exempt, r.Regressions,
			ms(quantile(r.Recovery, 0.5)), ms(quantile(r.Recovery, 1)), ms(quantile(r.Acquire, 0.5)), ms(quantile(r.Acquire, 0.99)))
	}
	return b.String()
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q * float64(len(s)-1))
	return s[i]
}

func ms(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}
