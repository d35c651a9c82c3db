package fault

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
	"github.com/dlock-go/dlock/integration/cluster/history"
)

// faultClass is one class of fault the nemesis injects. A family of
// classes is one type in a file of its own (fault_*.go); its classes are
// values of it, listed once in etcdFaults, guardFaults or redisFaults.
// Adding a class adds a value to one of those lists, and a type if no
// family fits.
//
// The nemesis calls, for each fault, Duration (which draws the fault's
// length from the run's PRNG), then Available, then Inject; it keeps the
// fault for its length and calls the heal Inject returned. Duration is
// called whatever Available says, so a seed's schedule does not depend
// on the run's configuration or timing.
type faultClass interface {
	// Name is the class's name, as Config.Classes and schedule.json
	// spell it.
	Name() string
	// Available reports whether the class can run in h's configuration;
	// if not, the fault is recorded as "skipped: " + reason and not
	// begun.
	Available(h *env.Harness) (ok bool, reason string)
	// Duration draws how long the fault is kept, from n's PRNG (the same
	// number of draws whatever happens).
	Duration(n *Nemesis) time.Duration
	// Inject begins the fault, aimed by role (in.pick breaks ties), and
	// records its targets and notes in in.f. It returns how to heal it
	// (nil: nothing to heal); an error is recorded in the fault's Err.
	Inject(ctx context.Context, in *injection) (heal func() error, err error)
}

// etcdFaults are the etcd fault classes, in EtcdClasses' order (a
// schedule's shuffle depends on it). Targets are chosen by role when the
// fault begins (the leader, the member a holder is pinned to, a worker in
// a given step), so a replay of a seed injects the same classes with the
// same durations in the same order, aimed at whoever has that role then.
var etcdFaults = []faultClass{
	network{"partition-minority", cutMinority}, // a follower cut off from the others
	network{"partition-leader", cutLeader},     // the leader cut off; its clients stay pinned to it
	network{"partition-holder", cutHolder},     // the member a lock holder talks to cut off
	network{"partition-oneway", cutOneWay},     // the leader's packets to the others dropped, not theirs to it
	network{"partition-bridge", cutBridge},     // two halves of the members cannot talk; the middle member hears both
	network{"loss", loseLinks},                 // 30% of packets between members dropped
	network{"slow", slowLeader},                // the leader's sends squeezed to 256 kbit/s
	kill{"kill", false},                        // SIGKILL a member (the leader half the time), restart later
	kill{"crash-lose", true},                   // SIGKILL a member and drop its unsynced writes (power loss)
	staleLeader{},                              // SIGSTOP the leader for longer than the TTL, then SIGCONT
	pauseWorker{"pause-acquire", "acquire"},    // SIGSTOP a worker waiting in Lock, for longer than the TTL
	pauseWorker{"pause-use", "inside"},         // SIGSTOP a worker while it holds, for longer than the TTL
	pauseWorker{"pause-release", "release"},    // SIGSTOP a worker about to Unlock, for longer than the TTL
	compact{},                                  // compact the store at its current revision, under load
	snapshot{},                                 // a follower cut off while 300 writes pass, so it catches up from a snapshot
	workerClock{"clock-slow", 0.5},             // a worker whose local deadlines run on a clock at half speed
	workerClock{"clock-fast", 2},               // a worker whose local deadlines run on a clock at double speed
	moveLeader{},                               // leadership transferred (MoveLeader, at the leader) to a follower, under load
	diskStall{},                                // a member's fsyncs hang for 1 to 3 TTL (the leader half the time; needs Lossy)
	memberReplace{},                            // a member (the leader half the time) removed, wiped, added back empty, restarted
}

// guardFaults are the resource-side fault classes, for runs with a
// Guard. Targets are chosen by role as the etcd classes' are.
var guardFaults = []faultClass{
	resourceKill{},  // SIGKILL the guard's server (every process of it) while a holder is inside; restart it from its data directory (WAL recovery)
	resourceStall{}, // SIGSTOP the guard's server while a holder is inside, for longer than the TTL, then SIGCONT
	resourceCut{},   // cut the namespace of a holder that is writing the fenced register off from the resource's, mid-write
}

// paymentsFaults are the payments workloads' classes: a holder killed or
// paused at each step of its charge (fault_payments.go).
var paymentsFaults = []faultClass{
	paymentsPoint{"kill-intent", "intent", true},     // SIGKILL a holder that has claimed its order and not called the API
	paymentsPoint{"kill-call", "call", true},         // SIGKILL a holder whose charge the API is processing
	paymentsPoint{"kill-outcome", "outcome", true},   // SIGKILL a holder that has its reply and has not recorded the outcome
	paymentsPoint{"pause-intent", "intent", false},   // SIGSTOP it there for longer than the TTL
	paymentsPoint{"pause-call", "call", false},       // likewise
	paymentsPoint{"pause-outcome", "outcome", false}, // likewise
}

// redisFaults are the Redis fault classes. Each aims at what the Redis
// backends' docs name as their limit; the table measures what it does to
// them.
var redisFaults = []faultClass{
	failover{},
	restartEmpty{},
	clockFastNode{},
	partitionRedis{},
	pauseRedisHolder{},
}

// The classes' names, in their lists' order.
var (
	// EtcdClasses are the etcd fault classes (etcdFaults).
	EtcdClasses = classNames(etcdFaults)
	// GuardClasses are the resource-side fault classes (guardFaults).
	GuardClasses = classNames(guardFaults)
	// RedisClasses are the Redis fault classes (redisFaults).
	RedisClasses = classNames(redisFaults)
	// PaymentsClasses are the payments workloads' classes (paymentsFaults).
	PaymentsClasses = classNames(paymentsFaults)
)

func classNames(cs []faultClass) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name()
	}
	return out
}

// injection is one fault being begun: the nemesis, the fault's record,
// and what aims it.
type injection struct {
	*Nemesis
	f    *history.Fault
	pick int // drawn before the fault's length: picks among candidates
	turn int // the faults of the class earlier in the run (some alternate targets with it)
}

// always is embedded by the classes that can run in every configuration.
type always struct{}

func (always) Available(*env.Harness) (bool, string) { return true, "" }

// leader returns the etcd leader, or (if none answers within 5 s) the
// pick-th member.
func (in *injection) leader(ctx context.Context) *env.Member {
	ms := in.h.Etcd.Members
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := in.h.Etcd.Leader(lctx)
	if err != nil {
		return ms[in.pick%len(ms)]
	}
	return l
}

// follower returns the pick-th member other than l.
func (in *injection) follower(l *env.Member) *env.Member {
	var fs []*env.Member
	for _, m := range in.h.Etcd.Members {
		if m != l {
			fs = append(fs, m)
		}
	}
	return fs[in.pick%len(fs)]
}

// leaderOrFollower returns the leader if pick is even, else a follower,
// and the leader.
func (in *injection) leaderOrFollower(ctx context.Context) (m, l *env.Member) {
	l = in.leader(ctx)
	m = in.follower(l)
	if in.pick%2 == 0 {
		m = l
	}
	return m, l
}

// cut drops the packets between member m and the other members.
func (in *injection) cut(m *env.Member) error {
	var errs []error
	for _, o := range in.h.Etcd.Members {
		if o != m {
			errs = append(errs, in.h.Net.Drop(m.Host, o.Host))
		}
	}
	return errors.Join(errs...)
}
