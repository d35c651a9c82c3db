package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/contrib/cmd/dlock/internal/capacity"
)

const capacityDescription = `
With --capacity, bench measures instead what one etcd cluster (one --dsn,
with its TLS and credentials) carries, running dlock, etcd's own
concurrency package (Session, Mutex) and "the limit" (a bare Txn
put-if-absent on the session's lease and a guarded delete, no queue) side
by side in the same run, each row the median of --runs runs:

  a  throughput: --inflight acquires in flight on distinct locks
     (grants_per_s, acquire_p50_ms, acquire_p99_ms)
  b  held locks: --held locks held (watched) across --held-sessions
     sessions, then an idle --window and --extra Lock+Unlock of other
     locks (lock_unlock_p50_ms/p99, leader_req_per_s, rss_bytes_per_lock,
     db_bytes_per_lock)
  c  waiters: --waiters waiters on one name (handoff_p50_ms/p99,
     leader_mem_bytes_per_waiter, out_of_order grants)
  d  sessions: --sessions idle sessions, then each holding 10 watched
     locks, over a --window each (leader_cpu_s_per_min, leader_req_per_s)
  e  mass expiry: --expire sessions holding a lock each, with a waiter
     each, their processes SIGKILLed at once (first_grant_s,
     all_granted_s: compare with the TTL and with etcd's 1000 revokes/s)
  f  failover: --failover-sessions live sessions when the leader fails
     (time_to_first_grant_s, all_renewed_s, sessions_lost)

The load comes from --procs worker processes (this binary run again),
each with --worker-clients etcd clients shared by its sessions; a session
stands for one production process. The costs come from the members'
/metrics on their client URLs: "leader" is the leader member's share,
"all" every member's (a client connected to a follower reaches the leader
through it: its requests show in all_req_per_s and the leader's CPU).

Scenario f moves the leader away gracefully (MoveLeader) unless
--failover-cmd names a command to kill it: it runs with sh -c, with
$DLOCK_LEADER_ENDPOINT (the leader's client URL) and $DLOCK_LEADER_ID
(its member ID, hex) set, and the killed member must come back by
itself (f waits up to 2 minutes for every member before its next run).
The TTL should be at least 3× the cluster's election timeout.

Progress lines go to stderr; the tables to stdout, or with --json one
JSON document (version 1: cluster, config, rows of scenario, load,
variant, impl, runs, metrics). The full scale takes hours: scale it down
with the flags, e.g.
  dlock bench --capacity --dsn etcd://h1:2379,h2:2379,h3:2379 \
    --scenarios a,d --inflight 1,16,64 --sessions 100,1000 --runs 1 --window 20s`

// intList is a comma-separated list of positive integers.
type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, n := range *l {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("%q: want positive integers separated by commas", v)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}

// capacityFlags are bench's flags for --capacity.
type capacityFlags struct {
	on                                                    *bool
	scenarios, impls, failoverCmd                         *string
	inflight, held, waiters, sessions, expire, failoverSs intList
	heldSessions, extra, herdMax, runs, procs, clients    *int
	ttl, window                                           *time.Duration
}

func addCapacityFlags(fs *flagSet) *capacityFlags {
	c := &capacityFlags{
		inflight: intList{1, 16, 64, 256, 1024}, held: intList{1000, 10000, 100000}, waiters: intList{10, 100, 1000, 10000},
		sessions: intList{100, 1000, 10000}, expire: intList{1000}, failoverSs: intList{10000},
	}
	c.on = fs.Bool("capacity", false, "measure what one etcd cluster carries: dlock, concurrency and the limit side by side (see above)")
	c.scenarios = fs.String("scenarios", strings.Join(capacity.Scenarios(), ","), "with --capacity: scenarios to run")
	c.impls = fs.String("impls", strings.Join(capacity.Impls(), ","), "with --capacity: implementations to compare")
	fs.Var(&c.inflight, "inflight", "with --capacity: a's acquires in flight")
	fs.Var(&c.held, "held", "with --capacity: b's held locks")
	c.heldSessions = fs.Int("held-sessions", 1000, "with --capacity: b's sessions holding them")
	c.extra = fs.Int("extra", 200, "with --capacity: b's Lock+Unlock of other locks measured")
	fs.Var(&c.waiters, "waiters", "with --capacity: c's waiters on one name")
	c.herdMax = fs.Int("herd-max", 100, "with --capacity: c's most waiters for the limit (it has no queue: a herd)")
	fs.Var(&c.sessions, "sessions", "with --capacity: d's sessions")
	fs.Var(&c.expire, "expire", "with --capacity: e's sessions SIGKILLed at once")
	fs.Var(&c.failoverSs, "failover-sessions", "with --capacity: f's live sessions")
	c.failoverCmd = fs.String("failover-cmd", "", "with --capacity: command killing the leader in f (sh -c; $DLOCK_LEADER_ENDPOINT, $DLOCK_LEADER_ID); default: MoveLeader")
	c.runs = fs.Int("runs", 3, "with --capacity: runs per row (the median is reported)")
	c.procs = fs.Int("procs", 4, "with --capacity: worker processes")
	c.clients = fs.Int("worker-clients", 4, "with --capacity: etcd clients per worker process")
	c.ttl = fs.Duration("ttl", 10*time.Second, "with --capacity: session TTL (whole seconds, ≥ 3× the election timeout)")
	c.window = fs.Duration("window", 60*time.Second, "with --capacity: b's and d's idle measuring window")
	return c
}

// runCapacity runs bench --capacity on dsn.
func runCapacity(ctx context.Context, e *env, fs *flagSet, c *capacityFlags, dsn string, asJSON bool, duration time.Duration) error {
	if !isSet(fs, "duration") {
		duration = 10 * time.Second
	}
	o := capacity.Options{
		DSN: dsn, Scenarios: splitList(*c.scenarios), Impls: splitList(*c.impls),
		Inflight: c.inflight, Held: c.held, HeldSessions: *c.heldSessions, Extra: *c.extra,
		Waiters: c.waiters, HerdMax: *c.herdMax, Sessions: c.sessions, Expire: c.expire, FailoverSessions: c.failoverSs,
		Runs: *c.runs, Procs: *c.procs, Clients: *c.clients, TTL: *c.ttl, Window: *c.window, Duration: duration,
		FailoverCmd: *c.failoverCmd, Progress: e.stderr,
	}
	if err := o.Validate(); err != nil {
		return usageError("%v", err)
	}
	rep, err := capacity.Run(ctx, o)
	if rep != nil {
		if asJSON {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			if jerr := enc.Encode(rep); jerr != nil {
				return jerr
			}
		} else if terr := capacity.WriteTable(e.stdout, rep); terr != nil {
			return terr
		}
	}
	return err
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
