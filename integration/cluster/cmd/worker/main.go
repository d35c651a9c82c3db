// Command worker is one client of the cluster fault harness: it takes a
// lock (a Mutex, a Semaphore permit, an RWMutex read or write lock) or an
// election's leadership over and over, uses a resource (cmd/resource)
// under each grant, and writes what it did, with wall-clock stamps, as
// history.Event lines for the harness's checkers.
//
// Usage:
//
//	worker -id 3 -workload mutex -endpoints http://10.0.1.2:2379 -resource http://10.0.9.2:8080 \
//	       -history run/history/w3.jsonl [-ttl 3s] [-hold 1.5s] [-seed 7] [-rounds 0] [-plant NAME]
//
// Per grant g = 1, 2, ... (see docs of acquireLock, use and runElection):
// "PHASE acquire <g>" on stdout and Event acquire; the acquire (bounded by
// 4×TTL; on error Event fail and a pause of 100–300ms); Event grant and
// "PHASE use <g>"; rounds of operations on the resource until a random
// hold (up to -hold) elapses or the grant's Done closes; then Event end
// (How "done", with the session's local deadline when that ended it), or
// "PHASE release <g>", Event end (How "unlock"), the release, and Event
// released. The PHASE lines go out unbuffered: the harness reads them to
// stop the worker at a given step.
//
// The worker is built with -tags dlock_faults: then the library reports
// each session's end through internal/fault's hook, which gives the end
// events their deadline, and the library's own fault seams
// (DLOCK_CLOCK_RATE, DLOCK_PLANT) are live.
//
// Harness plants (-plant; the library's are DLOCK_PLANT's):
//
//	first-token   every grant after the first records and presents the first grant's token (a stale token)
//	hold-forever  the first grant is held (and used) until SIGTERM or its loss, never released before
//	leak-key      at start, put the key dlock/leak/w<ID> without a lease, and never delete it
//	check-after-write  (-guard) the fenced write lands, without the guard, before the guard checks the token
//
// The payments workloads (-workload payments-journal, payments-nokeys,
// payments-nopending, payments-short, with -payments URL) hold a Mutex and
// charge orders at cmd/payments through an intent journal instead
// (payments.go); -reconcile makes one grant that only finishes what
// earlier holders left open.
//
// With -guard pg or redis (and -guard-dsn) the fenced register is on that
// server, written through contrib/pgfence or contrib/redisfence, beside
// the control's counter (guard.go).
//
// On SIGTERM or SIGINT it stops acquiring, ends the current grant (cuts
// its hold short and releases it), closes its session and history and
// exits 0. On any unexpected error it logs to stderr and exits 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock/integration/cluster/history"
	"github.com/dlock-go/dlock/internal/fault"
)

// config is the command line.
type config struct {
	id        int
	workload  string
	lock      string
	endpoints []string
	ttl       time.Duration
	resource  string
	history   string
	seed      uint64
	hold      time.Duration
	permits   int
	rounds    int
	plant     string
	try       float64       // the share of acquires by TryLock (TryAcquire, TryRLock), and for the mutex by LockAll
	payments  string        // the payments workloads' API (cmd/payments)
	dwell     time.Duration // the payments workloads' dwell at "intent" and "outcome"
	reconcile bool          // the payments workloads' final pass: one grant, Pending only
}

// The harness plants.
const (
	plantFirstToken  = "first-token"
	plantHoldForever = "hold-forever"
	plantLeakKey     = "leak-key"
)

func main() {
	var c config
	var endpoints string
	flag.IntVar(&c.id, "id", 0, "worker index (W in the events)")
	flag.StringVar(&c.workload, "workload", "mutex", "mutex, semaphore, rwmutex, election, or a payments workload (payments-journal, -nokeys, -nopending, -short)")
	flag.StringVar(&c.lock, "lock", "", `lock or election name (default "dlock-" + workload)`)
	flag.StringVar(&endpoints, "endpoints", "", "etcd client URLs, comma-separated")
	flag.DurationVar(&c.ttl, "ttl", 3*time.Second, "session TTL")
	flag.StringVar(&c.resource, "resource", "", "URL of cmd/resource (http://ip:port)")
	flag.StringVar(&c.history, "history", "", "path of the history.Event JSONL")
	flag.Uint64Var(&c.seed, "seed", 1, "PRNG seed (hold times, reader or writer)")
	flag.DurationVar(&c.hold, "hold", 0, "max hold of a grant; each holds rand[0,hold) (default ttl/2)")
	flag.IntVar(&c.permits, "permits", 2, "semaphore permits")
	flag.IntVar(&c.rounds, "rounds", 0, "stop after this many grants (0: until SIGTERM)")
	flag.StringVar(&c.plant, "plant", "", "harness plant: first-token, hold-forever or leak-key")
	flag.StringVar(&c.payments, "payments", "", "URL of cmd/payments (the payments workloads)")
	flag.DurationVar(&c.dwell, "dwell", 50*time.Millisecond, "payments: the dwell after the claim and after the call (where the nemesis aims)")
	flag.BoolVar(&c.reconcile, "reconcile", false, "payments: take one grant, finish the intents earlier holders left open, and exit")
	flag.Float64Var(&c.try, "try", 0, "share of acquires made with TryLock/TryAcquire/TryRLock (and, for the mutex, another share with lock.LockAll over it and a second name)")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix(fmt.Sprintf("worker w%d: ", c.id))
	if endpoints != "" {
		c.endpoints = strings.Split(endpoints, ",")
	}
	if c.lock == "" {
		c.lock = "dlock-" + c.workload
	}
	if c.hold == 0 {
		c.hold = c.ttl / 2
	}
	if c.reconcile {
		c.rounds = 1
	}
	if err := run(c); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func (c *config) validate() error {
	payments := history.IsPayments(c.workload)
	switch {
	case c.workload != "mutex" && c.workload != "semaphore" && c.workload != "rwmutex" && c.workload != "election" && !payments:
		return fmt.Errorf("-workload %q: want mutex, semaphore, rwmutex, election or one of %v", c.workload, history.PaymentsWorkloads)
	case payments && (c.payments == "" || c.dwell < 0):
		return fmt.Errorf("-workload %s needs -payments, and -dwell >= 0", c.workload)
	case c.reconcile && !payments:
		return errors.New("-reconcile is for the payments workloads")
	case len(c.endpoints) == 0:
		return errors.New("-endpoints is required")
	case c.resource == "":
		return errors.New("-resource is required")
	case c.history == "":
		return errors.New("-history is required")
	case c.ttl <= 0 || c.hold < 0:
		return fmt.Errorf("-ttl %v, -hold %v: want a positive TTL and a hold >= 0", c.ttl, c.hold)
	case c.try < 0 || c.try > 1 || c.workload == "mutex" && c.try > 0.5:
		return fmt.Errorf("-try %v: want a share in [0, 1] (at most 0.5 for the mutex: as much again goes to LockAll)", c.try)
	case c.permits < 1 || c.rounds < 0:
		return fmt.Errorf("-permits %d, -rounds %d: want permits >= 1, rounds >= 0", c.permits, c.rounds)
	case c.plant != "" && c.plant != plantFirstToken && c.plant != plantHoldForever && c.plant != plantLeakKey && c.plant != plantCheckAfterWrite:
		return fmt.Errorf("-plant %q: want %s, %s, %s or %s", c.plant, plantFirstToken, plantHoldForever, plantLeakKey, plantCheckAfterWrite)
	case c.plant == plantCheckAfterWrite && *guardName != "pg" && *guardName != "redis" && *guardName != "s3":
		return fmt.Errorf("-plant %s needs -guard pg, redis or s3", plantCheckAfterWrite)
	}
	return nil
}

func run(c config) (err error) {
	onRedis := c.workload == "redis" || c.workload == "redlock"
	validate := c.validate
	if onRedis {
		validate = c.validateRedis
	}
	if err := validate(); err != nil {
		return err
	}
	stop, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	hist, err := history.Create(c.history)
	if err != nil {
		return err
	}
	defer func() {
		if e := hist.Close(); err == nil && e != nil {
			err = fmt.Errorf("history: %w", e)
		}
	}()
	if onRedis {
		return runRedis(stop, c, hist) // redis.go
	}
	return runEtcd(stop, c, hist)
}

// runEtcd is run for the etcd workloads.
func runEtcd(stop context.Context, c config, hist *history.Writer) error {
	if !fault.Enabled {
		log.Print("built without -tags dlock_faults: end events carry no deadline, DLOCK_* faults are off")
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return err
	}
	defer cli.Close()

	w := &worker{
		cfg:  c,
		cli:  cli,
		hist: hist,
		// A partitioned resource must not hang the worker: no request
		// outlives a TTL.
		http: &http.Client{Timeout: c.ttl},
		rng:  rand.New(rand.NewPCG(c.seed, uint64(c.id))),
		ends: watchSessionEnds(),
	}
	defer w.http.CloseIdleConnections()
	if w.guard, err = openGuard(stop, c.ttl); err != nil {
		return err
	}
	if w.guard != nil {
		defer w.guard.Close()
	}
	if c.plant == plantLeakKey {
		if err := w.leakKey(stop); err != nil {
			return err
		}
	}
	log.Printf("%s on %q, ttl %v, hold %v, rounds %d, plant %q, guard %q", c.workload, c.lock, c.ttl, c.hold, c.rounds, c.plant, *guardName)
	if history.IsPayments(c.workload) {
		w.pay = newPayments(w) // payments.go
		defer w.pay.close()
	}
	if c.workload == "election" {
		err = w.runElection(stop)
	} else {
		err = w.runLocks(stop)
	}
	if err == nil {
		err = w.err
	}
	log.Printf("done: %d grants", w.grants)
	return err
}

// leakKey puts the plant's unleased key.
func (w *worker) leakKey(stop context.Context) error {
	ctx, cancel := context.WithTimeout(stop, 4*w.cfg.ttl)
	defer cancel()
	key := fmt.Sprintf("dlock/leak/w%d", w.cfg.id)
	if _, err := w.cli.Put(ctx, key, "planted"); err != nil {
		if stop.Err() != nil {
			return nil // SIGTERM: not an error
		}
		return fmt.Errorf("plant %s: put %s: %w", plantLeakKey, key, err)
	}
	return nil
}
