package capacity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"time"
)

// Scenarios lists the scenarios in the order they run.
func Scenarios() []string { return []string{"a", "b", "c", "d", "e", "f"} }

// Leader is the etcd leader that a failover kills.
type Leader struct {
	Endpoint string // its client URL
	ID       uint64 // its member ID
}

// Options configure Run. Every zero field takes the default named in its
// comment (the full scale of issue 37).
type Options struct {
	// DSN names the etcd cluster, its TLS and credentials (dlock.ParseDSN).
	// Required.
	DSN string
	// Scenarios to run, among "a".."f". Default: all.
	Scenarios []string
	// Impls to compare, among Impls(). Default: all.
	Impls []string

	Inflight         []int // a: acquires in flight; default 1,16,64,256,1024
	Held             []int // b: held locks; default 1000,10000,100000
	HeldSessions     int   // b: sessions holding them; default 1000
	Extra            int   // b: Lock+Unlock of extra locks measured; default 200
	Waiters          []int // c: waiters on one name; default 10,100,1000,10000
	HerdMax          int   // c: most waiters the limit's herd runs with; default 100
	Sessions         []int // d: sessions; default 100,1000,10000
	Expire           []int // e: sessions SIGKILLed at once; default 1000
	FailoverSessions []int // f: live sessions at the leader's failure; default 10000

	Runs     int           // runs of each row, the median reported; default 3
	Procs    int           // worker processes; default 4
	Clients  int           // etcd clients per worker; default 4
	TTL      time.Duration // session TTL; default 10s
	Window   time.Duration // b, d: idle measuring window; default 60s
	Duration time.Duration // a: each in-flight level's run; default 10s

	// FailoverCmd, if set, is run by f with sh -c, with
	// DLOCK_LEADER_ENDPOINT and DLOCK_LEADER_ID (hex) in its environment,
	// to kill the leader. Default: a graceful MoveLeader.
	FailoverCmd string
	// Failover, if set, kills the leader instead of FailoverCmd (tests).
	Failover func(ctx context.Context, l Leader) error
	// Recover, if set, is called after each failover run to bring the
	// killed member back; without it f waits for every member to answer
	// again before its next run.
	Recover func(ctx context.Context, l Leader) error

	// Progress, if set, receives one line per run.
	Progress io.Writer
	// Worker, if set, makes the command that runs a worker (WorkerEnv is
	// added to its environment). Default: this executable.
	Worker func() *exec.Cmd
}

func (o Options) withDefaults() Options {
	def := func(v *[]int, d ...int) {
		if len(*v) == 0 {
			*v = d
		}
	}
	if len(o.Scenarios) == 0 {
		o.Scenarios = Scenarios()
	}
	if len(o.Impls) == 0 {
		o.Impls = Impls()
	}
	def(&o.Inflight, 1, 16, 64, 256, 1024)
	def(&o.Held, 1000, 10000, 100000)
	def(&o.Waiters, 10, 100, 1000, 10000)
	def(&o.Sessions, 100, 1000, 10000)
	def(&o.Expire, 1000)
	def(&o.FailoverSessions, 10000)
	defInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defInt(&o.HeldSessions, 1000)
	defInt(&o.Extra, 200)
	defInt(&o.HerdMax, 100)
	defInt(&o.Runs, 3)
	defInt(&o.Procs, 4)
	defInt(&o.Clients, 4)
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	defDur(&o.TTL, 10*time.Second)
	defDur(&o.Window, 60*time.Second)
	defDur(&o.Duration, 10*time.Second)
	return o
}

// Validate checks o (after defaults).
func (o Options) Validate() error {
	var errs []error
	if o.DSN == "" {
		errs = append(errs, errors.New("no DSN"))
	}
	for _, s := range o.Scenarios {
		if !slices.Contains(Scenarios(), s) {
			errs = append(errs, fmt.Errorf("unknown scenario %q (want a,b,c,d,e,f)", s))
		}
	}
	for _, s := range o.Impls {
		if !slices.Contains(Impls(), s) {
			errs = append(errs, fmt.Errorf("unknown implementation %q", s))
		}
	}
	for name, v := range map[string][]int{"inflight": o.Inflight, "held": o.Held, "waiters": o.Waiters, "sessions": o.Sessions, "expire": o.Expire, "failover-sessions": o.FailoverSessions} {
		for _, n := range v {
			if n < 1 {
				errs = append(errs, fmt.Errorf("%s: %d must be at least 1", name, n))
			}
		}
	}
	for name, n := range map[string]int{"runs": o.Runs, "procs": o.Procs, "clients": o.Clients, "held-sessions": o.HeldSessions, "extra": o.Extra} {
		if n < 1 {
			errs = append(errs, fmt.Errorf("%s: %d must be at least 1", name, n))
		}
	}
	if o.TTL < 2*time.Second || o.TTL%time.Second != 0 {
		errs = append(errs, fmt.Errorf("ttl %v: must be a whole number of seconds, at least 2s", o.TTL))
	}
	if o.Window <= 0 || o.Duration <= 0 {
		errs = append(errs, errors.New("window and duration must be positive"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("capacity: %w", err)
	}
	return nil
}
