// Command prometheus is an example: it serves dlock's OpenTelemetry
// metrics (DESIGN.md, "Metrics") to Prometheus. It wires the OpenTelemetry
// Prometheus exporter into a MeterProvider, passes that provider to
// dlock.Config.MeterProvider, runs a few workers that lock and unlock in a
// loop (TryLock first, then Lock, so that every outcome shows), and serves
// /metrics.
//
// Without --dsn it starts a one-member embedded etcd on free loopback
// ports, with its data in a temporary directory removed on exit; with
// --dsn it uses that backend (etcd://, redis://, redlock://...). It runs
// until SIGINT or SIGTERM.
//
//	go run ./contrib/examples/prometheus --addr 127.0.0.1:9464
//	curl -s 127.0.0.1:9464/metrics | grep ^dlock_
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.etcd.io/etcd/server/v3/embed"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lock"
)

// DefaultAddr is where /metrics is served when --addr is not given
// (9464 is the port OpenTelemetry's Prometheus exporters conventionally use).
const DefaultAddr = "127.0.0.1:9464"

// shutdownTimeout bounds each step of the shutdown (HTTP server, Client).
const shutdownTimeout = 5 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stderr, nil)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "prometheus:", err)
		os.Exit(1)
	}
}

// run runs the example until ctx ends; ready, if not nil, is called with
// the address /metrics is served on once it is.
func run(ctx context.Context, args []string, stderr io.Writer, ready func(addr string)) error {
	fs := flag.NewFlagSet("prometheus", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", DefaultAddr, "listen address of the /metrics endpoint")
	dsn := fs.String("dsn", "", "backend DSN (etcd://, redis://, redlock://...); empty starts an embedded etcd")
	workers := fs.Int("workers", 4, "goroutines locking in a loop")
	names := fs.Int("locks", 2, "lock names the workers share (lock-0, lock-1, ...)")
	hold := fs.Duration("hold", 20*time.Millisecond, "how long each grant is held")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *workers < 1 || *names < 1 || *hold < 0 {
		return errors.New("--workers and --locks must be positive, --hold must not be negative")
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	// The exporter is a metric reader: the MeterProvider pushes nothing,
	// Prometheus pulls through the registry at each scrape.
	reg := promclient.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return fmt.Errorf("prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer func() { _ = mp.Shutdown(context.Background()) }()

	var cfg dlock.Config
	if *dsn == "" {
		addr, stopEtcd, err := startEtcd(ctx)
		if err != nil {
			return err
		}
		defer stopEtcd()
		cfg = dlock.Config{Backend: dlock.BackendEtcd, Endpoints: []string{addr}}
	} else if cfg, err = dlock.ParseDSN(*dsn); err != nil {
		return err
	}
	cfg.Prefix = "prometheus-example"
	cfg.MeterProvider = mp
	cfg.Logger = log
	client, err := dlock.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		_ = client.Close(cctx)
	}()
	lockers := make([]lock.Locker, *names)
	for i := range lockers {
		if lockers[i], err = client.Locker(lockName(i)); err != nil {
			return err
		}
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if ready != nil {
		ready(ln.Addr().String())
	}
	fmt.Fprintf(stderr, "serving http://%s/metrics\n", ln.Addr())

	wctx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var wg sync.WaitGroup
	for i := range *workers {
		wg.Go(func() { work(wctx, lockers[i%*names], log.With("lock", lockName(i%*names)), *hold) })
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	stopWork()
	wg.Wait()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if serveErr == nil {
		_ = srv.Shutdown(sctx)
		serveErr = <-served
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}

func lockName(i int) string { return fmt.Sprintf("lock-%d", i) }

// work locks l in a loop until ctx ends: a TryLock (refused while another
// worker holds l), then, if refused, a Lock; it holds each grant for hold
// (or until it is lost) and unlocks it.
func work(ctx context.Context, l lock.Locker, log *slog.Logger, hold time.Duration) {
	for ctx.Err() == nil {
		h, err := l.TryLock(ctx)
		if errors.Is(err, lock.ErrLocked) {
			h, err = l.Lock(ctx)
		}
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("acquire failed", "err", err)
				wait(ctx, 100*time.Millisecond, nil) // the backend may be down: do not spin
			}
			continue
		}
		wait(ctx, hold, h.Done())
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		if err := h.Unlock(uctx); err != nil && !errors.Is(err, lock.ErrLockLost) {
			log.Warn("unlock failed", "err", err)
		}
		cancel()
	}
}

// wait returns after d, when ctx ends, or when done (if not nil) closes.
func wait(ctx context.Context, d time.Duration, done <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-done:
	}
}

// startEtcd starts a one-member etcd on loopback ports the kernel picks,
// with its data in a temporary directory and its logs discarded, and
// returns its client address and a function that stops it and removes
// the data.
//
// The CLI's demo (contrib/cmd/dlock/demo.go) starts an embedded etcd too.
// Each has its own: the two are modules of their own, and the only module
// both import, the core, must not depend on etcd's server. This one is
// the least an example needs (etcd's defaults but for the addresses); the
// demo's is tuned for its timeline.
func startEtcd(ctx context.Context) (addr string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "dlock-prometheus-")
	if err != nil {
		return "", nil, err
	}
	loopback := []url.URL{{Scheme: "http", Host: "127.0.0.1:0"}}
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls, cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = loopback, loopback, loopback, loopback
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogOutputs = []string{os.DevNull}
	e, err := embed.StartEtcd(cfg)
	if err == nil {
		select {
		case <-e.Server.ReadyNotify():
			return e.Clients[0].Addr().String(), func() { e.Close(); _ = os.RemoveAll(dir) }, nil
		case err = <-e.Err():
		case <-ctx.Done():
			err = ctx.Err()
		}
		e.Close()
	}
	_ = os.RemoveAll(dir)
	return "", nil, fmt.Errorf("embedded etcd: %w", err)
}
