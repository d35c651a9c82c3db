package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/dlock-go/dlock/internal/cleanup"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lock"
)

const benchDescription = `
Runs --clients clients, each with its own connection (and, on etcd, its own
session), that take turns on one lock for --duration, and prints per backend:

  acquire p50/p99   from calling Lock to being granted (includes waiting)
  handoff p50/p99   from one holder starting its Unlock to the next grant
  throughput        grants per second

Give --dsn several times to compare backends side by side, for example
  dlock bench --dsn etcd://127.0.0.1:2379 --dsn redis://127.0.0.1:6379
Each DSN runs on its own, one after the other. Without --dsn, bench
measures the backend that $DLOCK_DSN names. A progress line goes to
stderr every second on runs of 3s or more.`

// Defaults for bench's flags.
const (
	defaultBenchClients  = 4
	defaultBenchDuration = 5 * time.Second
)

// dsnList is a repeatable --dsn flag.
type dsnList []string

func (l *dsnList) String() string     { return strings.Join(*l, ",") }
func (l *dsnList) Set(s string) error { *l = append(*l, s); return nil }

func runBench(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "bench", "--dsn DSN [--dsn DSN...] [flags]", benchDescription)
	var dsns dsnList
	fs.Var(&dsns, "dsn", "backend to measure (repeatable; default $"+envDSN+"): etcd://h:2379, etcds://h:2379?cacert=…, redis://h:6379, rediss://…, redlock://h1,h2,h3 (see dlock.ParseDSN)")
	clients := fs.Int("clients", defaultBenchClients, "concurrent clients per backend")
	duration := fs.Duration("duration", defaultBenchDuration, "how long to run each backend")
	hold := fs.Duration("hold", 0, "how long each grant holds the lock before releasing it")
	name := fs.String("lock", fmt.Sprintf("dlock-bench/%d", os.Getpid()), "lock name to contend on")
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
	var results []benchResult
	for i, cfg := range cfgs {
		b := bencher{cfg: cfg, label: redact(dsns[i]), clients: *clients, duration: *duration, hold: *hold, name: *name, progress: e.stderr}
		r, err := b.run(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", b.label, err)
		}
		results = append(results, r)
	}
	printBench(e.stdout, results)
	return nil
}

type bencher struct {
	cfg      dlock.Config
	label    string
	clients  int
	duration time.Duration
	hold     time.Duration
	name     string
	progress io.Writer
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
		cctx, cancel := cleanup.Context(context.Background())
		defer cancel()
		for _, c := range opened {
			c.Close(cctx)
		}
	}()
	for i := range lockers {
		c, err := open(ctx, b.cfg)
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
				uctx, ucancel := cleanup.Context(rctx)
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
	if b.duration >= 3*time.Second {
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
	res.elapsed = time.Since(start)
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("interrupted: %w", err)
	}
	if len(res.acquire) == 0 && res.firstErr != nil {
		return res, errors.Join(errors.New("no grant"), res.firstErr)
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
	row("acquire p99", func(r benchResult) string { return pct(r.acquire, 0.99) })
	row("handoff p50", func(r benchResult) string { return pct(r.handoff, 0.50) })
	row("handoff p99", func(r benchResult) string { return pct(r.handoff, 0.99) })
	row("errors", func(r benchResult) string { return fmt.Sprint(r.errors) })
	tw.Flush()
	for _, r := range rs {
		if r.firstErr != nil {
			fmt.Fprintf(w, "%s: first error: %s\n", r.label, oneLine(r.firstErr.Error()))
		}
	}
}

// pct returns the p-th percentile of ds (nearest rank), or "-".
func pct(ds []time.Duration, p float64) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.5) - 1
	i = min(max(i, 0), len(s)-1)
	return round(s[i]).String()
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

// redact removes a password from a DSN for display.
func redact(dsn string) string {
	scheme, rest, ok := strings.Cut(dsn, "://")
	if !ok {
		return dsn
	}
	authority, path, hasPath := strings.Cut(rest, "/")
	at := strings.LastIndexByte(authority, '@')
	if at < 0 {
		return dsn
	}
	user, _, _ := strings.Cut(authority[:at], ":")
	out := scheme + "://" + user + "@" + authority[at+1:]
	if hasPath {
		out += "/" + path
	}
	return out
}
