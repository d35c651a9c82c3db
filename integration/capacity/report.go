// Package capacity reads the JSON document that `dlock bench --capacity
// --json` writes (issue 37) and draws it: SVG charts (Charts) and the
// markdown tables of BENCHMARKS.md's "Capacity" section (Markdown). The
// command integration/capacity/charts runs both; docs/capacity.md is the
// sizing guide that quotes them.
//
// Output is deterministic: rows, metrics and series come out in a fixed
// order whatever the order of the input, so that regenerating from the same
// document gives the same bytes.
package capacity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Version is the only document version Read accepts.
const Version = 1

// Report is one run of the capacity driver.
type Report struct {
	Version int             `json:"version"`
	Started string          `json:"started"`
	Cluster Cluster         `json:"cluster"`
	Config  json.RawMessage `json:"config"`
	Rows    []Row           `json:"rows"`
}

// Cluster describes the etcd cluster the run measured.
type Cluster struct {
	Endpoints   []string `json:"endpoints"`
	Members     int      `json:"members"`
	EtcdVersion string   `json:"etcd_version"`
}

// Row is one implementation at one load of one scenario: the medians of
// Runs runs.
type Row struct {
	Scenario string             `json:"scenario"`
	Load     float64            `json:"load"`
	Variant  string             `json:"variant"`
	Impl     string             `json:"impl"`
	Runs     int                `json:"runs"`
	Metrics  map[string]float64 `json:"metrics"`
	Note     string             `json:"note,omitempty"`
}

// The implementations a row may measure, in the order of every table and
// legend: dlock, etcd's concurrency package (Session, Mutex), and the limit
// (a bare Txn put-if-absent on its own lease and a guarded delete).
const (
	ImplDlock       = "dlock"
	ImplConcurrency = "concurrency"
	ImplLimit       = "limit"
)

func impls() []string { return []string{ImplDlock, ImplConcurrency, ImplLimit} }

// Read decodes and validates one document. Its errors name the input
// (name), and for a syntax error the line and column.
func Read(name string, r io.Reader) (*Report, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("capacity: read %s: %w", name, err)
	}
	var rep Report
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&rep); err != nil {
		return nil, fmt.Errorf("capacity: %s: %w", name, jsonError(data, err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("capacity: %s: %s: more than one JSON document (the driver writes one)", name, position(data, dec.InputOffset()))
	}
	if err := rep.Validate(); err != nil {
		return nil, fmt.Errorf("capacity: %s: %w", name, err)
	}
	return &rep, nil
}

// jsonError adds the line and column to a decoding error that has an offset.
func jsonError(data []byte, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		// Offset counts the bytes read, the offending one included.
		return fmt.Errorf("%s: not valid JSON: %w", position(data, max(syn.Offset-1, 0)), err)
	case errors.As(err, &typ):
		return fmt.Errorf("%s: field %q: %w", position(data, typ.Offset), typ.Field, err)
	case errors.Is(err, io.EOF):
		return errors.New("empty input: want one JSON document")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("truncated JSON: %w", err)
	}
	return err
}

func position(data []byte, off int64) string {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	before := data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(off) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return fmt.Sprintf("line %d, column %d", line, col)
}

// Validate checks the document against the schema: the version, each row's
// scenario, variant, implementation, load and metrics, and that no two rows
// measure the same thing.
func (r *Report) Validate() error {
	if r.Version != Version {
		return fmt.Errorf("version %d: this reader knows version %d only", r.Version, Version)
	}
	if len(r.Rows) == 0 {
		return errors.New("no rows")
	}
	type key struct {
		scenario, variant, impl string
		load                    float64
	}
	seen := make(map[key]int, len(r.Rows))
	for i, row := range r.Rows {
		if err := row.validate(); err != nil {
			return fmt.Errorf("rows[%d]: %w", i, err)
		}
		k := key{row.Scenario, row.Variant, row.Impl, row.Load}
		if j, ok := seen[k]; ok {
			return fmt.Errorf("rows[%d]: the same scenario, load, variant and impl as rows[%d] (%s)", i, j, row.label())
		}
		seen[k] = i
	}
	return nil
}

func (row Row) label() string {
	s := fmt.Sprintf("scenario %s, load %s, impl %s", row.Scenario, formatLoad(row.Load), row.Impl)
	if row.Variant != "" {
		s += ", variant " + row.Variant
	}
	return s
}

func (row Row) validate() error {
	sc, ok := scenarioOf(row.Scenario)
	if !ok {
		return fmt.Errorf("scenario %q: want one of a, b, c, d, e, f", row.Scenario)
	}
	if !slices.Contains(sc.variants, row.Variant) {
		want := `"" (none)`
		if len(sc.variants) > 1 || sc.variants[0] != "" {
			want = `"` + strings.Join(sc.variants, `" or "`) + `"`
		}
		return fmt.Errorf("scenario %s: variant %q: want %s", row.Scenario, row.Variant, want)
	}
	if !slices.Contains(impls(), row.Impl) {
		return fmt.Errorf("impl %q: want %s, %s or %s", row.Impl, ImplDlock, ImplConcurrency, ImplLimit)
	}
	if !(row.Load > 0) || math.IsInf(row.Load, 0) {
		return fmt.Errorf("%s: load must be a positive number (%s)", row.label(), sc.load)
	}
	if row.Runs < 1 {
		return fmt.Errorf("%s: runs %d: want at least 1", row.label(), row.Runs)
	}
	if len(row.Metrics) == 0 && row.Note == "" {
		return fmt.Errorf("%s: no metrics, and no note to say why", row.label())
	}
	for name, v := range row.Metrics {
		if name == "" {
			return fmt.Errorf("%s: a metric with an empty name", row.label())
		}
		if v < 0 && !delta(name) {
			return fmt.Errorf("%s: metric %s is %v: no metric is negative", row.label(), name, v)
		}
	}
	return nil
}

// delta reports whether the metric named name is a difference of two
// readings spread over a load (memory or size per lock or per waiter),
// which the process's garbage collection can make negative at small
// loads.
func delta(name string) bool {
	return strings.Contains(name, "_bytes_per_lock") || strings.Contains(name, "_bytes_per_waiter")
}

// scenario is what the tables and charts know of one scenario.
type scenario struct {
	id       string
	title    string
	load     string   // what the load counts, a column heading
	variants []string // the variants a row may have, "" for none
	metrics  []metric // in table order
}

type metric struct {
	name  string
	label string // with its unit
	ratio bool   // whether dlock/anchor is meaningful (false for counts that should be 0)
}

// scenarios is the schema of issue 37, in table order.
func scenarios() []scenario {
	return []scenario{
		{"a", "a. Throughput: distinct locks", "acquires in flight", []string{""}, []metric{
			{"grants_per_s", "grants/s", true},
			{"acquire_p50_ms", "acquire p50 (ms)", true},
			{"acquire_p99_ms", "acquire p99 (ms)", true},
		}},
		{"b", "b. Held locks", "held locks", []string{""}, []metric{
			{"lock_unlock_p50_ms", "Lock+Unlock p50 (ms)", true},
			{"lock_unlock_p99_ms", "Lock+Unlock p99 (ms)", true},
			{"leader_req_per_s", "leader requests/s", true},
			{"leader_rx_bytes_per_s", "leader received bytes/s", true},
			{"rss_bytes_per_lock", "etcd RSS bytes per held lock", true},
			{"db_bytes_per_lock", "etcd db bytes per held lock", true},
		}},
		{"c", "c. Waiters on one name", "waiters", []string{""}, []metric{
			{"handoff_p50_ms", "handoff p50 (ms)", true},
			{"handoff_p99_ms", "handoff p99 (ms)", true},
			{"leader_mem_bytes_per_waiter", "leader memory bytes per waiter", true},
			{"out_of_order", "grants out of FIFO order", false},
		}},
		{"d", "d. Sessions: the leader's cost", "sessions", []string{"idle", "watched10"}, []metric{
			{"leader_cpu_s_per_min", "leader CPU-s per minute", true},
			{"leader_req_per_s", "leader requests/s", true},
		}},
		{"e", "e. Mass expiry", "sessions killed", []string{""}, []metric{
			{"first_grant_s", "first waiter granted (s)", true},
			{"all_granted_s", "every waiter granted (s)", true},
		}},
		{"f", "f. Leader failover", "sessions", []string{""}, []metric{
			{"time_to_first_grant_s", "first grant after the kill (s)", true},
			{"all_renewed_s", "every session renewed (s)", true},
			{"sessions_lost", "sessions lost with a live process", false},
		}},
	}
}

func scenarioOf(id string) (scenario, bool) {
	for _, s := range scenarios() {
		if s.id == id {
			return s, true
		}
	}
	return scenario{}, false
}

// metricsOf returns the scenario's metrics in table order, followed by any
// other metric its rows carry, sorted by name.
func metricsOf(sc scenario, rows []Row) []metric {
	ms := slices.Clone(sc.metrics)
	var extra []string
	for _, row := range rows {
		for name := range row.Metrics {
			known := slices.ContainsFunc(ms, func(m metric) bool { return m.name == name })
			if !known && !slices.Contains(extra, name) {
				extra = append(extra, name)
			}
		}
	}
	slices.Sort(extra)
	for _, name := range extra {
		ms = append(ms, metric{name: name, label: name, ratio: true})
	}
	return ms
}

// rowsOf returns the rows of one scenario sorted by load, variant and impl.
func (r *Report) rowsOf(id string) []Row {
	var rows []Row
	for _, row := range r.Rows {
		if row.Scenario == id {
			rows = append(rows, row)
		}
	}
	slices.SortFunc(rows, compareRows)
	return rows
}

func compareRows(a, b Row) int {
	if c := cmpFloat(a.Load, b.Load); c != 0 {
		return c
	}
	if c := strings.Compare(a.Variant, b.Variant); c != 0 {
		return c
	}
	return slices.Index(impls(), a.Impl) - slices.Index(impls(), b.Impl)
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// formatValue prints a figure with three or four significant digits and
// thousands separated, in exponent form only below 0.001.
func formatValue(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 1000:
		return groupThousands(fmt.Sprintf("%.0f", v))
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	case a >= 0.1:
		return fmt.Sprintf("%.3f", v)
	case a >= 0.01:
		return fmt.Sprintf("%.4f", v)
	case a >= 0.001:
		return fmt.Sprintf("%.5f", v)
	}
	return fmt.Sprintf("%.2e", v)
}

// formatLoad prints a load: a whole number as one, with thousands
// separated.
func formatLoad(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return groupThousands(fmt.Sprintf("%.0f", v))
	}
	return formatValue(v)
}

func groupThousands(s string) string {
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return sign + b.String()
}
