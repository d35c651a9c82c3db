package env

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Workloads are the etcd workloads, one lock (or election) each.
var Workloads = []string{"mutex", "semaphore", "rwmutex", "election"}

// Config describes one run.
type Config struct {
	Seed        int64
	TTL         time.Duration // the workers' session TTL; default 3s
	Workloads   []string      // default Workloads
	PerWorkload int           // worker processes per workload; default 4
	Duration    time.Duration // how long faults are injected
	Faults      int           // or: this many faults, each class in turn (a seeded order)
	Hold        time.Duration // the workers' longest hold; default TTL/2
	Classes     []string      // fault classes to draw from; default all etcd classes
	Gap         time.Duration // quiet after each heal; default RecoveryBound
	Dir         string        // artifacts; a temporary directory if empty
	Lossy       bool          // members' data on lossyfs (crash-lose and disk-stall need it)
	Members     int           // etcd members; default 3
	EtcdBin     string        // the etcd server binary (etcdtest.Binary)
	EtcdOmit    []string      // default etcd flags the binary lacks (EtcdConfig.Omit); none if empty

	Plant         string // the library's plants in every worker (DLOCK_PLANT)
	WorkerPlant   string // the workers' own plants (-plant), in every worker
	ResourcePlant string // the resource's plant (-plant)
	Rounds        int    // grants per worker (0: until the end)
	Permits       int    // the semaphore's permits; default 2
	RedisReplicas int    // the redis workload's replicas that must acknowledge a grant (DSN replicas=); 0: none
	// Try is the share of acquires made with TryLock, TryAcquire or
	// TryRLock, and for the mutex another share with lock.LockAll over its
	// name and a second one; default 1/4 (a mutex: 1/4 tries, 1/4 LockAll);
	// negative: none.
	Try float64

	// Guard puts a real resource behind the guard users deploy in front
	// of the fenced register (one of Guards): "pg", a PostgreSQL server
	// in the resource's namespace, written through contrib/pgfence, with
	// the control's counter in the same row (guardserver_pg.go); "redis", a Redis
	// server there, written through contrib/redisfence (guardserver_redis.go);
	// "http", the resource process's register behind
	// contrib/httpfence's Middleware, "grpc" behind contrib/grpcfence's
	// interceptors (guardserver_resource.go); "s3", versitygw there, written
	// through contrib/s3fence (guardserver_s3.go).
	// "": the resource
	// process's in-memory register.
	Guard string

	// PaymentsWindow is how long the payments-short workload's payment
	// API keeps a key (its -window); default TTL/3, shorter than any
	// pause, so that its duplicates show the journal's documented limit.
	// The other payments workloads' APIs keep keys 24 h.
	PaymentsWindow time.Duration
	// PaymentsDelay is how long the payment APIs take to process a
	// charge (their -delay); default 150 ms.
	PaymentsDelay time.Duration
}

func (c *Config) Defaults() {
	if c.TTL == 0 {
		c.TTL = 3 * time.Second
	}
	if len(c.Workloads) == 0 {
		c.Workloads = Workloads
	}
	if c.PerWorkload == 0 {
		c.PerWorkload = 4
	}
	if c.Members == 0 {
		c.Members = 3
	}
	if c.Gap == 0 {
		c.Gap = c.RecoveryBound()
	}
	if c.Hold == 0 {
		c.Hold = c.TTL / 2
	}
	if c.Permits == 0 {
		c.Permits = 2
	}
	if c.Try == 0 {
		c.Try = 0.25
	}
	if c.PaymentsWindow == 0 {
		c.PaymentsWindow = c.TTL / 3
	}
	if c.PaymentsDelay == 0 {
		c.PaymentsDelay = 150 * time.Millisecond
	}
}

// RecoveryBound is how soon after a fault heals every workload must grant
// again: a session TTL (a holder cut off by the fault may keep its lease
// that long), an election timeout (1 s: the cluster may need a leader),
// half a TTL (a heartbeat interval, for the renewals that notice) and 3 s
// for a waiter's retries to reach the new state.
func (c Config) RecoveryBound() time.Duration {
	ttl := c.TTL
	if ttl == 0 {
		ttl = 3 * time.Second
	}
	return ttl + time.Second + ttl/2 + 3*time.Second
}

// Harness is a running cluster: the network, etcd, the resource and the
// workers.
type Harness struct {
	Cfg      Config
	Dir      string
	Net      *Net
	Etcd     *Etcd
	Resource *Proc
	ResHost  *Host
	resURL   string
	Guard    GuardServer // the guard's server (Config.Guard); nil without one

	bins bins

	mu       sync.Mutex
	workers  []*Worker         // every process ever started, restarts included
	servers  []*Proc           // a Redis run's servers and the payment APIs, every process ever started
	payments []*PaymentsServer // the payments workloads' APIs
	nextID   int
	closed   bool

	cleanups []func() // run by Close, after every process is gone
}

// Worker is one worker process.
type Worker struct {
	ID       int
	Workload string
	Slot     int     // which of its workload's workers (restarts keep it)
	Member   *Member // its only endpoint
	Rate     float64 // DLOCK_CLOCK_RATE, 0 for none
	Proc     *Proc

	mu     sync.Mutex
	phase  string // last PHASE line: "acquire 3", "use 3", "release 3"
	ch     chan struct{}
	killed bool // by Kill: its exit is no failure
}

// Kill SIGKILLs the worker (a fault: it dies wherever it is) and waits
// until it has been reaped. StopWorkers does not count its exit.
func (w *Worker) Kill() {
	w.mu.Lock()
	w.killed = true
	w.mu.Unlock()
	w.Proc.Kill()
}

// Killed tells whether Kill was called.
func (w *Worker) Killed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.killed
}

// Phase returns the worker's current phase ("acquire", "use", "release",
// or "" before the first) and the grant number.
func (w *Worker) Phase() (string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, g, _ := strings.Cut(w.phase, " ")
	n, _ := strconv.Atoi(g)
	return p, n
}

// Changed returns a channel closed at the next phase change.
func (w *Worker) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

func (w *Worker) line(s string) {
	p, ok := strings.CutPrefix(s, "PHASE ")
	if !ok {
		return
	}
	w.mu.Lock()
	w.phase = p
	close(w.ch)
	w.ch = make(chan struct{})
	w.mu.Unlock()
}

// Start builds what is needed and starts a cluster. On error it cleans up
// what it had started.
func Start(ctx context.Context, cfg Config) (h *Harness, err error) {
	cfg.Defaults()
	if h, err = NewHarness(cfg, cfg.EtcdBin); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			h.Close()
			h = nil
		}
	}()
	var hosts []*Host
	for i := range cfg.Members {
		mh, err := h.Net.AddHost(fmt.Sprintf("m%d", i))
		if err != nil {
			return h, err
		}
		hosts = append(hosts, mh)
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if h.bins.etcd == "" {
		return h, errors.New("cluster: no etcd binary (Config.EtcdBin or DLOCK_ETCD)")
	}
	h.Etcd, err = StartEtcd(sctx, EtcdConfig{Bin: h.bins.etcd, Hosts: hosts, Dir: filepath.Join(h.Dir, "etcd"), Lossy: cfg.Lossy, Omit: cfg.EtcdOmit})
	if err != nil {
		return h, fmt.Errorf("etcd: %w", err)
	}
	resArgs := []string{"-cap", fmt.Sprintf("dlock-semaphore=%d", cfg.Permits)}
	switch cfg.Guard {
	case "http":
		resArgs = append(resArgs, "-guard", "http")
	case "grpc":
		resArgs = append(resArgs, "-guard", "grpc") // and -grpc: startResource
	}
	if err := h.startResource(sctx, resArgs...); err != nil {
		return h, err
	}
	switch cfg.Guard {
	case "":
	case "pg":
		if h.Guard, err = h.StartPG(sctx, h.ResHost); err != nil {
			return h, fmt.Errorf("postgres: %w", err)
		}
	case "redis":
		if h.Guard, err = h.startRedisGuard(sctx, h.ResHost); err != nil {
			return h, fmt.Errorf("redis: %w", err)
		}
	case "s3":
		if h.Guard, err = h.StartS3Guard(sctx, h.ResHost); err != nil {
			return h, fmt.Errorf("versitygw: %w", err)
		}
	case "http":
		h.Guard = resourceGuard{h, h.resURL}
	case "grpc":
		h.Guard = resourceGuard{h, h.resGRPC()}
	default:
		return h, fmt.Errorf("cluster: Guard %q: want one of %v", cfg.Guard, Guards)
	}
	if cfg.HasPayments() {
		if err := h.startPayments(sctx); err != nil {
			return h, fmt.Errorf("payments: %w", err)
		}
	}
	for _, wl := range cfg.Workloads {
		for slot := range cfg.PerWorkload {
			if _, err := h.StartWorker(wl, slot, 0); err != nil {
				return h, err
			}
		}
	}
	return h, nil
}

// NewHarness builds the programs, makes the run's directory and network,
// and registers the harness for CloseAll. On error it has closed what it
// made.
func NewHarness(cfg Config, etcd string) (*Harness, error) {
	b, err := build(etcd)
	if err != nil {
		return nil, err
	}
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "dlock-cluster-"); err != nil {
			return nil, err
		}
	}
	h := &Harness{Cfg: cfg, Dir: dir, bins: b}
	register(h)
	Sweep()
	if h.Net, err = NewNet(); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// startResource starts the resource in its own namespace, with extra
// flags, and waits until it answers.
func (h *Harness) startResource(ctx context.Context, extra ...string) error {
	var err error
	if h.ResHost, err = h.Net.AddHost("res"); err != nil {
		return err
	}
	addr := h.ResHost.IP + ":8080"
	h.resURL = "http://" + addr
	args := append([]string{h.bins.resource, "-listen", addr, "-log", filepath.Join(h.Dir, "resource.jsonl")}, extra...)
	if h.Cfg.Guard == "grpc" {
		args = append(args, "-grpc", h.resGRPC())
	}
	if h.Cfg.ResourcePlant != "" {
		args = append(args, "-plant", h.Cfg.ResourcePlant)
	}
	if h.Resource, err = StartProc(h.ResHost, "resource", filepath.Join(h.Dir, "logs", "resource.log"), nil, nil, args...); err != nil {
		return err
	}
	if err := waitHTTP(ctx, h.resURL+"/healthz"); err != nil {
		return fmt.Errorf("resource: %w", err)
	}
	return nil
}

// resGRPC is the resource's gRPC address (Guard "grpc").
func (h *Harness) resGRPC() string { return h.ResHost.IP + ":9090" }

// StartWorker starts a worker of workload wl in slot (pinned to member
// slot mod the members), with clock rate rate (0: none).
func (h *Harness) StartWorker(wl string, slot int, rate float64) (*Worker, error) {
	m := h.Etcd.Members[slot%len(h.Etcd.Members)]
	return h.launch(wl, slot, rate, m, m.Host, "-endpoints", m.Endpoint())
}

// launch starts a worker process of workload wl on host, with the flags
// every backend takes and extra (where its lock service is), and
// registers it.
func (h *Harness) launch(wl string, slot int, rate float64, m *Member, host *Host, extra ...string) (*Worker, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, errors.New("cluster: harness closed")
	}
	id := h.nextID
	h.nextID++
	h.mu.Unlock()
	w := &Worker{ID: id, Workload: wl, Slot: slot, Member: m, Rate: rate, ch: make(chan struct{})}
	args := append([]string{h.bins.worker,
		"-id", strconv.Itoa(id), "-workload", wl,
		"-ttl", h.Cfg.TTL.String(), "-resource", h.resURL,
		"-history", filepath.Join(h.Dir, "history", fmt.Sprintf("w%d.jsonl", id)),
		"-seed", strconv.FormatInt(h.Cfg.Seed*1000+int64(id), 10),
		"-permits", strconv.Itoa(h.Cfg.Permits), "-hold", h.Cfg.Hold.String(), "-rounds", strconv.Itoa(h.Cfg.Rounds),
		"-try", strconv.FormatFloat(max(h.Cfg.Try, 0), 'f', -1, 64),
	}, extra...)
	if h.Cfg.WorkerPlant != "" {
		args = append(args, "-plant", h.Cfg.WorkerPlant)
	}
	if h.Guard != nil {
		args = append(args, "-guard", h.Cfg.Guard, "-guard-dsn", h.Guard.DSN())
	}
	if url := h.paymentsURL(wl); url != "" {
		args = append(args, "-payments", url)
	}
	var env []string
	if h.Cfg.Plant != "" {
		env = append(env, "DLOCK_PLANT="+h.Cfg.Plant)
	}
	if rate != 0 {
		env = append(env, "DLOCK_CLOCK_RATE="+strconv.FormatFloat(rate, 'f', -1, 64))
	}
	p, err := StartProc(host, fmt.Sprintf("w%d", id), filepath.Join(h.Dir, "logs", fmt.Sprintf("w%d.log", id)), env, w.line, args...)
	if err != nil {
		return nil, err
	}
	w.Proc = p
	h.mu.Lock()
	h.workers = append(h.workers, w)
	h.mu.Unlock()
	return w, nil
}

// Workers returns the live workers (the latest process of each slot).
func (h *Harness) Workers() []*Worker {
	h.mu.Lock()
	defer h.mu.Unlock()
	latest := map[string]*Worker{}
	var order []string
	for _, w := range h.workers {
		k := fmt.Sprintf("%s/%d", w.Workload, w.Slot)
		if _, ok := latest[k]; !ok {
			order = append(order, k)
		}
		latest[k] = w
	}
	out := make([]*Worker, 0, len(order))
	for _, k := range order {
		out = append(out, latest[k])
	}
	return out
}

// AllWorkers returns every worker process ever started.
func (h *Harness) AllWorkers() []*Worker {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*Worker(nil), h.workers...)
}

// StopWorkers sends every live worker SIGTERM (resuming stopped ones) and
// waits up to grace for each to release and exit. It returns the workers
// that did not exit cleanly.
func (h *Harness) StopWorkers(grace time.Duration) []error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for _, w := range h.AllWorkers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-w.Proc.Done():
				// Exited earlier: a restarted slot, -rounds reached, or
				// killed by a fault.
				if err := w.Proc.Err(); err != nil && !w.Killed() {
					mu.Lock()
					errs = append(errs, fmt.Errorf("w%d (%s) exited early: %v", w.ID, w.Workload, err))
					mu.Unlock()
				}
				return
			default:
			}
			if err := w.Proc.Stop(grace); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("w%d (%s): %v", w.ID, w.Workload, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// Leftovers reports what the run left in etcd once every worker has
// stopped: keys and leases. It waits up to wait for expired sessions'
// leases to go.
func (h *Harness) Leftovers(ctx context.Context, wait time.Duration) ([]string, error) {
	cli, err := h.Etcd.Client()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	deadline := time.Now().Add(wait)
	for {
		var left []string
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := cli.Get(rctx, "", clientv3.WithFromKey(), clientv3.WithKeysOnly())
		if err == nil {
			for _, kv := range resp.Kvs {
				left = append(left, "key "+string(kv.Key))
			}
			var ls *clientv3.LeaseLeasesResponse
			if ls, err = cli.Leases(rctx); err == nil {
				for _, l := range ls.Leases {
					left = append(left, fmt.Sprintf("lease %x", l.ID))
				}
			}
		}
		cancel()
		if err == nil && (len(left) == 0 || time.Now().After(deadline)) {
			return left, nil
		}
		if err != nil && time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return left, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Close kills every process, unmounts the disks and deletes the network.
// It is idempotent.
func (h *Harness) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	ws, servers, cleanups := h.workers, h.servers, h.cleanups
	h.mu.Unlock()
	defer unregister(h)
	var errs []error
	for _, w := range ws {
		w.Proc.Kill()
	}
	if h.Guard != nil {
		// Every process of the guard's server while its parent lives
		// (PostgreSQL's backends are process groups of their own).
		h.Guard.Kill()
	}
	for _, p := range servers {
		select {
		case <-p.Done(): // killed by a fault: its PID may be another's now
		default:
			p.Kill()
		}
	}
	if h.Resource != nil {
		h.Resource.Kill()
	}
	if h.Etcd != nil {
		errs = append(errs, h.Etcd.Close())
	}
	if h.Net != nil {
		errs = append(errs, h.Net.Close())
	}
	for _, f := range cleanups {
		f()
	}
	return errors.Join(errs...)
}

// Every harness not yet closed, for CloseAll (an interrupted test binary).
var live struct {
	sync.Mutex
	m map[*Harness]bool
}

func register(h *Harness) {
	live.Lock()
	defer live.Unlock()
	if live.m == nil {
		live.m = map[*Harness]bool{}
	}
	live.m[h] = true
}

func unregister(h *Harness) {
	live.Lock()
	defer live.Unlock()
	delete(live.m, h)
}

// CloseAll closes every harness still open: for a test binary's SIGINT
// handler, so that an interrupted run leaves no namespace or mount.
func CloseAll() {
	live.Lock()
	hs := make([]*Harness, 0, len(live.m))
	for h := range live.m {
		hs = append(hs, h)
	}
	live.Unlock()
	for _, h := range hs {
		h.Close()
	}
}

func waitHTTP(ctx context.Context, url string) error {
	cl := &http.Client{Timeout: time.Second}
	for {
		if resp, err := cl.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
