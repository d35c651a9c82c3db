package main

// The Redis workloads: "redis", the single-node Mutex on the master that a
// Sentinel group names, and "redlock", Redlock over independent nodes.
// Both are opened as an application opens them: a DSN, dlock.ParseDSN,
// dlock.Open and Client.Locker (whose Redis grants extend themselves every
// TTL/3 while held). The loop is runLocks' without a session: one grant
// after another, each used and released as the etcd workloads' are.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/integration/cluster/history"
	"github.com/dlock-go/dlock/internal/fault"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/redis"
)

// The Redis flags, beside main's.
var (
	redisMasterName = flag.String("redis-master-name", "mymaster", "the master's name in the Sentinel group (-workload redis)")
	sentinels       = flag.String("sentinels", "", "sentinels as host:port, comma-separated (-workload redis)")
	redlockNodes    = flag.String("redlock", "", "Redlock nodes as host:port, comma-separated (-workload redlock)")
	redisReplicas   = flag.Int("redis-replicas", 0, "replicas that must acknowledge a grant: the DSN's replicas= (-workload redis)")
)

// redisDSN returns the DSN of c's workload: redis+sentinel:// for "redis",
// redlock:// for "redlock", with the lock validity c.ttl.
func redisDSN(c config) (string, error) {
	q := url.Values{"ttl": {c.ttl.String()}}
	switch {
	case c.workload == "redis" && *sentinels != "":
		q.Set("master_name", *redisMasterName)
		if *redisReplicas > 0 {
			q.Set("replicas", strconv.Itoa(*redisReplicas))
		}
		return "redis+sentinel://" + *sentinels + "?" + q.Encode(), nil
	case c.workload == "redlock" && *redlockNodes != "":
		return "redlock://" + *redlockNodes + "?" + q.Encode(), nil
	case c.workload == "redis":
		return "", errors.New("-workload redis needs -sentinels")
	}
	return "", errors.New("-workload redlock needs -redlock")
}

// validateRedis is validate for the Redis workloads, which need no etcd.
func (c *config) validateRedis() error {
	switch {
	case c.resource == "":
		return errors.New("-resource is required")
	case c.history == "":
		return errors.New("-history is required")
	case c.ttl <= 0 || c.hold < 0:
		return fmt.Errorf("-ttl %v, -hold %v: want a positive TTL and a hold >= 0", c.ttl, c.hold)
	case c.rounds < 0:
		return fmt.Errorf("-rounds %d: want rounds >= 0", c.rounds)
	case c.plant != "" && c.plant != plantFirstToken && c.plant != plantHoldForever:
		return fmt.Errorf("-plant %q: want %s or %s with a Redis workload", c.plant, plantFirstToken, plantHoldForever)
	}
	return nil
}

// runRedis is run for the workloads "redis" and "redlock".
func runRedis(stop context.Context, c config, hist *history.Writer) error {
	dsn, err := redisDSN(c)
	if err != nil {
		return err
	}
	dcfg, err := dlock.ParseDSN(dsn)
	if err != nil {
		return err
	}
	cli, err := openRedis(stop, dcfg)
	if cli == nil {
		return err // nil when stopped
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*c.ttl)
		defer cancel()
		if e := cli.Close(ctx); e != nil {
			log.Printf("close client: %v", e)
		}
	}()
	locker, err := cli.Locker(c.lock)
	if err != nil {
		return err
	}
	w := &worker{
		cfg:  c,
		hist: hist,
		http: &http.Client{Timeout: c.ttl},
		rng:  rand.New(rand.NewPCG(c.seed, uint64(c.id))),
	}
	defer w.http.CloseIdleConnections()
	log.Printf("%s on %q (%s), ttl %v, hold %v, rounds %d, plant %q", c.workload, c.lock, dlock.RedactDSN(dsn), c.ttl, c.hold, c.rounds, c.plant)
	err = w.runRedis(stop, locker)
	if err == nil {
		err = w.err
	}
	log.Printf("done: %d grants", w.grants)
	return err
}

// openRedis opens the client, retrying every 200ms until stop ends (then
// it returns nil, nil): Open fails while the servers do not answer.
func openRedis(stop context.Context, cfg dlock.Config) (*dlock.Client, error) {
	return retryOpen(stop, "client", func() (*dlock.Client, error) { return dlock.Open(stop, cfg) }, dlock.ErrInvalidConfig)
}

// runRedis is the loop of the Redis workloads: acquire (bounded by
// 4×TTL), use, release, as runLocks does on etcd. A grant lost before its
// hold ended is released too (its key may outlive the local validity on a
// server; the release is a compare-and-delete), without an event: its End
// (How "done") already ended it.
func (w *worker) runRedis(stop context.Context, l lock.Locker) error {
	for w.more(stop) {
		via := w.via()
		g := w.acquire("x", via)
		ctx, cancel := context.WithTimeout(stop, 4*w.cfg.ttl)
		acq := l.Lock
		if via == "try" {
			acq = l.TryLock
		}
		held, err := acq(ctx)
		granted := history.Now() // right after Lock returns
		cancel()
		if err != nil {
			if w.failed(g, err) {
				return err
			}
			sleep(stop, w.between(100*time.Millisecond, 300*time.Millisecond))
			continue
		}
		h := held.(*redis.Grant)
		hold := w.holdTime()
		if w.cfg.plant == plantHoldForever && w.grants == 0 {
			hold = -1
		}
		lost, noticed := w.use(stop, g, h, "x", via, 0, granted, hold)
		if lost {
			w.lost(g, h, noticed, validityEnd(h, noticed), true)
		} else {
			w.releasing(g)
		}
		uctx, ucancel := context.WithTimeout(context.Background(), 2*w.cfg.ttl)
		err = h.Unlock(uctx)
		ucancel()
		if lost {
			continue
		}
		w.emit(history.Event{G: g, Kind: history.Released, T: history.Now(), Err: errString(err)})
		if err != nil {
			log.Printf("g%d: unlock: %v", g, err)
		}
	}
	return nil
}

// validityEnd returns End.Deadline for a lost Redis grant: its local
// deadline (wall-clock Unix ns) if that had passed when the loss was
// noticed, for Done had closed by then; else 0 (Extend found the key gone
// first, and Done closed then).
func validityEnd(h *redis.Grant, noticed int64) int64 {
	dl := fault.Wall(h.Deadline()).UnixNano()
	if dl <= noticed {
		return dl
	}
	return 0
}
