package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lock"
)

const benchDescription = `
Runs --clients clients, each with its own connection (and, on etcd, its own
session), that take turns on one lock for --duration, and prints per backend:

  acquire p50/p90/p99/max   from calling Lock to being granted (includes waiting)
  handoff p50/p90/p99       from one holder starting its Unlock to the next grant
  throughput                grants per second

and a histogram of the acquire latencies, in log-spaced buckets (1-2-5 per
decade), one bar of '#' per bucket.

Give --dsn several times to compare backends side by side, for example
  dlock bench --dsn etcd://127.0.0.1:2379 --dsn redis://127.0.0.1:6379
Each DSN runs on its own, one after the other. Without --dsn, bench
measures the backend that $DLOCK_DSN names. Connecting waits up to the
DSN's dial_timeout (default 5s; e.g. etcd://h:2379?dial_timeout=10s).

A backend that cannot be reached, or that grants nothing, does not stop
the others: bench prints every backend that ran to the end (one that
granted nothing with its errors), then the failures on stderr, one line
naming each failed DSN, and exits 1.

With --json, it prints instead one JSON object per backend, one per line:
backend, dsn (its password removed), clients, ops (grants), errors,
duration_s, throughput (grants/s), p50_ms, p90_ms, p99_ms, max_ms and
handoff_p50_ms, handoff_p90_ms, handoff_p99_ms (acquire latencies unless
named handoff), and histogram: the acquire latency buckets, each
{"le_ms": upper bound, "count": grants}, the last one with "le_ms": null
(no upper bound).

A progress line ("<dsn>: 3s of 10s, N grants") goes to stderr every
second when stderr is a terminal, or with --progress.
` + capacityDescription

// Defaults for bench's flags.
const (
	defaultBenchClients  = 4
	defaultBenchDuration = 5 * time.Second
)

// dsnList is a repeatable --dsn flag.
type dsnList []string

func (l *dsnList) String() string { return strings.Join(*l, ",") }
func (l *dsnList) Set(s string) error {
	var d dsnFlag
	if err := d.Set(s); err != nil {
		return err
	}
	*l = append(*l, s)
	return nil
}

func runBench(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "bench", "--dsn DSN [--dsn DSN...] [flags]", benchDescription)
	var dsns dsnList
	fs.Var(&dsns, "dsn", "backend to measure (repeatable; default $"+envDSN+"): etcd://h:2379, etcds://h:2379?cacert=…, redis://h:6379, rediss://…, redlock://h1,h2,h3 (see dlock.ParseDSN)")
	clients := fs.Int("clients", defaultBenchClients, "concurrent clients per backend")
	duration := fs.Duration("duration", defaultBenchDuration, "how long to run each backend (with --capacity: each load of scenario a, default 10s)")
	hold := fs.Duration("hold", 0, "how long each grant holds the lock before releasing it")
	name := fs.String("lock", fmt.Sprintf("dlock-bench/%d", os.Getpid()), "lock name to contend on")
	asJSON := fs.Bool("json", false, "print one JSON object per backend (one per line) instead of the table; with --capacity, one JSON document")
	progress := fs.Bool("progress", false, "print a progress line to stderr every second (default: only when stderr is a terminal)")
	capFlags := addCapacityFlags(fs)
	pos, err := parse(fs, args, true)
	if err != nil {
		return err
	}
	from := "--dsn"
	if len(dsns) == 0 {
		if d := e.getenv(envDSN); d != "" {
			dsns, from = dsnList{d}, "$"+envDSN
		}
	}
	if *capFlags.on {
		switch {
		case len(pos) > 0:
			return usageError("unexpected argument %q", pos[0])
		case len(dsns) != 1:
			return usageError("--capacity measures one etcd cluster: give one --dsn (or set $%s)", envDSN)
		}
		if _, err := dlock.ParseDSN(dsns[0]); err != nil {
			return usageError("%s: %v", from, err)
		}
		return runCapacity(ctx, e, fs, capFlags, dsns[0], *asJSON, *duration)
	}
	switch {
	case len(pos) > 0:
		return usageError("unexpected argument %q", pos[0])
	case len(dsns) == 0:
		return usageError("--dsn is required (or set $%s)", envDSN)
	case *clients < 1:
		return usageError("--clients %d must be at least 1", *clients)
	case *duration <= 0:
		return usageError("--duration %v must be positive", *duration)
	case *hold < 0:
		return usageError("--hold %v must not be negative", *hold)
	}
	if err := lock.ValidateName(*name); err != nil {
		return usageError("--lock: %v", err)
	}
	cfgs := make([]dlock.Config, len(dsns))
	for i, d := range dsns {
		if cfgs[i], err = dlock.ParseDSN(d); err != nil {
			return usageError("%s: %v", from, err)
		}
	}
	// Each backend runs on its own: one that fails does not discard the
	// others' results. Every finished backend is printed, then the
	// failures make the exit code.
	var (
		results []benchResult
		failed  []string
	)
	for i, cfg := range cfgs {
		b := bencher{cfg: cfg, label: dlock.RedactDSN(dsns[i]), clients: *clients, duration: *duration, hold: *hold, name: *name}
		if *progress || isTerminal(e.stderr) {
			b.progress = e.stderr
		}
		r, err := b.run(ctx)
		if r.elapsed > 0 { // it ran to the end, with or without grants
			results = append(results, r)
		}
		if err != nil {
			failed = append(failed, b.label+": "+err.Error())
			if ctx.Err() != nil {
				break // interrupted: the backends after it do not run
			}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		for _, r := range results {
			if err := enc.Encode(r.record()); err != nil {
				return err
			}
		}
	} else if len(results) > 0 {
		printBench(e.stdout, results)
	}
	switch {
	case len(failed) == 1:
		return errors.New(failed[0])
	case len(failed) > 1:
		return fmt.Errorf("%d of %d backends failed: %s", len(failed), len(cfgs), strings.Join(failed, "; "))
	}
	return nil
}

// benchHint names bench's connection settings, for open.
const benchHint = "--dsn and its dial_timeout parameter"

type bencher struct {
	cfg      dlock.Config
	label    string
	clients  int
	duration time.Duration
	hold     time.Duration
	name     string
	progress io.Writer // nil: no progress lines
}

type benchResult struct {
	label    string
	backend  string
	clients  int
	elapsed  time.Duration
	acquire  []time.Duration
	handoff  []time.Duration
	errors   int
	firstErr error
}

func (b *bencher) run(ctx context.Context) (benchResult, error) {
	// Connect every client first, so that the clock measures locking only.
	lockers := make([]lock.Locker, b.clients)
	var opened []*dlock.Client
	defer func() {
		cctx, cancel := cleanupContext(context.Background())
		defer cancel()
		for _, c := range opened {
			c.Close(cctx)
		}
	}()
	for i := range lockers {
		c, err := open(ctx, b.cfg, benchHint)
		if err != nil {
			return benchResult{}, err
		}
		opened = append(opened, c)
		if lockers[i], err = c.Locker(b.name); err != nil {
			return benchResult{}, err
		}
	}

	res := benchResult{label: b.label, backend: b.cfg.Backend, clients: b.clients}
	var (
		mu          sync.Mutex
		lastRelease time.Time // set by the holder just before Unlock
	)
	rctx, cancel := context.WithTimeout(ctx, b.duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for _, l := range lockers {
		wg.Go(func() {
			for rctx.Err() == nil {
				t0 := time.Now()
				h, err := l.Lock(rctx)
				if err != nil {
					if rctx.Err() == nil {
						mu.Lock()
						res.errors++
						if res.firstErr == nil {
							res.firstErr = err
						}
						mu.Unlock()
					}
					continue
				}
				granted := time.Now()
				mu.Lock()
				res.acquire = append(res.acquire, granted.Sub(t0))
				if !lastRelease.IsZero() {
					res.handoff = append(res.handoff, granted.Sub(lastRelease))
				}
				mu.Unlock()
				if b.hold > 0 {
					select {
					case <-time.After(b.hold):
					case <-rctx.Done():
					}
				}
				mu.Lock()
				lastRelease = time.Now()
				mu.Unlock()
				uctx, ucancel := cleanupContext(rctx)
				if err := h.Unlock(uctx); err != nil {
					mu.Lock()
					res.errors++
					if res.firstErr == nil {
						res.firstErr = err
					}
					mu.Unlock()
				}
				ucancel()
			}
		})
	}
	if b.progress != nil {
		tick := time.NewTicker(time.Second)
	progress:
		for {
			select {
			case <-tick.C:
				mu.Lock()
				n := len(res.acquire)
				mu.Unlock()
				fmt.Fprintf(b.progress, "bench %s: %v of %v, %d grants\n", b.label, time.Since(start).Round(time.Second), b.duration, n)
			case <-rctx.Done():
				break progress
			}
		}
		tick.Stop()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return benchResult{}, fmt.Errorf("interrupted: %w", err)
	}
	res.elapsed = time.Since(start)
	if len(res.acquire) == 0 && res.firstErr != nil {
		return res, fmt.Errorf("no grant in %v: %w", b.duration, res.firstErr)
	}
	return res, nil
}

func printBench(w io.Writer, rs []benchResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', tabwriter.AlignRight)
	row := func(label string, f func(r benchResult) string) {
		fmt.Fprintf(tw, "%s\t", label)
		for _, r := range rs {
			fmt.Fprintf(tw, "%s\t", f(r))
		}
		fmt.Fprintln(tw)
	}
	row("", func(r benchResult) string { return r.label })
	row("backend", func(r benchResult) string { return r.backend })
	row("clients", func(r benchResult) string { return fmt.Sprint(r.clients) })
	row("grants", func(r benchResult) string { return fmt.Sprint(len(r.acquire)) })
	row("throughput (grants/s)", func(r benchResult) string {
		return fmt.Sprintf("%.1f", float64(len(r.acquire))/r.elapsed.Seconds())
	})
	row("acquire p50", func(r benchResult) string { return pct(r.acquire, 0.50) })
	row("acquire p90", func(r benchResult) string { return pct(r.acquire, 0.90) })
	row("acquire p99", func(r benchResult) string { return pct(r.acquire, 0.99) })
	row("acquire max", func(r benchResult) string { return pct(r.acquire, 1) })
	row("handoff p50", func(r benchResult) string { return pct(r.handoff, 0.50) })
	row("handoff p90", func(r benchResult) string { return pct(r.handoff, 0.90) })
	row("handoff p99", func(r benchResult) string { return pct(r.handoff, 0.99) })
	row("errors", func(r benchResult) string { return fmt.Sprint(r.errors) })
	tw.Flush()
	for _, r := range rs {
		if r.firstErr != nil {
			fmt.Fprintf(w, "%s: first error: %s\n", r.label, oneLine(r.firstErr.Error()))
		}
	}
	for _, r := range rs {
		fmt.Fprintf(w, "\n%s: acquire latency histogram (%d grants)\n", r.label, len(r.acquire))
		printHistogram(w, histogram(r.acquire))
	}
}

// pct returns the p-th percentile of ds (nearest rank), or "-".
func pct(ds []time.Duration, p float64) string {
	d, ok := quantile(ds, p)
	if !ok {
		return "-"
	}
	return round(d).String()
}

// quantile returns the p-th percentile of ds (nearest rank; p 1 is the
// maximum); false if ds is empty.
func quantile(ds []time.Duration, p float64) (time.Duration, bool) {
	if len(ds) == 0 {
		return 0, false
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.5) - 1
	i = min(max(i, 0), len(s)-1)
	return s[i], true
}

// histBounds are the upper bounds of the histogram's buckets: 1-2-5 per
// decade, from 10µs to 50s; a last bucket takes what is above.
var histBounds = func() []time.Duration {
	var bs []time.Duration
	for d := 10 * time.Microsecond; d <= 10*time.Second; d *= 10 {
		bs = append(bs, d, 2*d, 5*d)
	}
	return bs
}()

// bucket is one bucket of a latency histogram: the samples ≤ le (and
// above the previous bucket's le); le 0 is the last bucket, unbounded.
type bucket struct {
	le    time.Duration
	count int
}

// histogram counts ds in histBounds' buckets, from the first non-empty
// bucket to the last one (none if ds is empty).
func histogram(ds []time.Duration) []bucket {
	bs := make([]bucket, len(histBounds)+1)
	for i, le := range histBounds {
		bs[i].le = le
	}
	for _, d := range ds {
		i, _ := slices.BinarySearch(histBounds, d) // the first bound ≥ d
		bs[i].count++
	}
	first := slices.IndexFunc(bs, func(b bucket) bool { return b.count > 0 })
	if first < 0 {
		return nil
	}
	last := len(bs) - 1
	for bs[last].count == 0 {
		last--
	}
	return bs[first : last+1]
}

// histWidth is the length of the longest bar.
const histWidth = 40

// printHistogram prints one line per bucket: its bound, a bar of '#'
// proportional to its count (at least one '#' if not empty), the count.
func printHistogram(w io.Writer, bs []bucket) {
	most := 0
	for _, b := range bs {
		most = max(most, b.count)
	}
	label := func(b bucket) string {
		if b.le == 0 {
			return "> " + histBounds[len(histBounds)-1].String()
		}
		return "<= " + b.le.String()
	}
	width := 0
	for _, b := range bs {
		width = max(width, utf8.RuneCountInString(label(b)))
	}
	for _, b := range bs {
		n := 0
		if b.count > 0 {
			n = max(1, b.count*histWidth/most)
		}
		fmt.Fprintf(w, "  %*s |%-*s| %d\n", width, label(b), histWidth, strings.Repeat("#", n), b.count)
	}
}

// benchRecord is one backend's --json object.
type benchRecord struct {
	Backend      string        `json:"backend"`
	DSN          string        `json:"dsn"` // without its password
	Clients      int           `json:"clients"`
	Ops          int           `json:"ops"` // grants
	Errors       int           `json:"errors"`
	FirstError   string        `json:"first_error,omitempty"`
	DurationS    float64       `json:"duration_s"`
	Throughput   float64       `json:"throughput"` // grants per second
	P50MS        float64       `json:"p50_ms"`     // acquire latencies; 0 without grants
	P90MS        float64       `json:"p90_ms"`
	P99MS        float64       `json:"p99_ms"`
	MaxMS        float64       `json:"max_ms"`
	HandoffP50MS float64       `json:"handoff_p50_ms"`
	HandoffP90MS float64       `json:"handoff_p90_ms"`
	HandoffP99MS float64       `json:"handoff_p99_ms"`
	Histogram    []benchBucket `json:"histogram"`
}

// benchBucket is one histogram bucket of --json: the acquires that took
// at most LeMS milliseconds (and more than the previous bucket's); LeMS
// null: no upper bound.
type benchBucket struct {
	LeMS  *float64 `json:"le_ms"`
	Count int      `json:"count"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (r benchResult) record() benchRecord {
	q := func(ds []time.Duration, p float64) float64 {
		d, _ := quantile(ds, p)
		return ms(d)
	}
	rec := benchRecord{
		Backend: r.backend, DSN: r.label, Clients: r.clients, Ops: len(r.acquire), Errors: r.errors,
		DurationS: r.elapsed.Seconds(),
		P50MS:     q(r.acquire, 0.50), P90MS: q(r.acquire, 0.90), P99MS: q(r.acquire, 0.99), MaxMS: q(r.acquire, 1),
		HandoffP50MS: q(r.handoff, 0.50), HandoffP90MS: q(r.handoff, 0.90), HandoffP99MS: q(r.handoff, 0.99),
		Histogram: []benchBucket{},
	}
	if r.elapsed > 0 {
		rec.Throughput = float64(rec.Ops) / r.elapsed.Seconds()
	}
	if r.firstErr != nil {
		rec.FirstError = oneLine(r.firstErr.Error())
	}
	hist := histogram(r.acquire)
	if len(hist) == 0 || hist[len(hist)-1].le != 0 {
		// The documented form ends with the unbounded bucket, also when
		// no sample is in it: above the last bucket shown, none.
		hist = append(hist, bucket{})
	}
	for _, b := range hist {
		bb := benchBucket{Count: b.count}
		if b.le != 0 {
			le := ms(b.le)
			bb.LeMS = &le
		}
		rec.Histogram = append(rec.Histogram, bb)
	}
	return rec
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
