package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
	"github.com/dlock-go/dlock/integration/cluster/history"
	"github.com/dlock-go/dlock/internal/testenv"
)

// TestPlanted shows that each checker can fail: every case plants one bug
// (in the library through -tags dlock_faults and DLOCK_PLANT, in the
// worker, or in the resource) and requires the checker made for it to
// report it.
func TestPlanted(t *testing.T) {
	testenv.SkipUnlessLong(t, "~5 min: a cluster run per planted bug")
	env.Need(t)
	t.Parallel()
	for _, c := range plantedCases {
		t.Run(c.name, func(t *testing.T) {
			if c.cfg.Guard != "" {
				needGuard(t, c.cfg.Guard)
			}
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
			defer cancel()
			cfg := c.cfg
			cfg.Seed = seed(t, 7)
			rep := runCluster(t, ctx, cfg)
			for _, f := range rep.Failures {
				if strings.Contains(f, c.expect) {
					t.Logf("the checker caught the plant: %s", f)
					return
				}
			}
			t.Errorf("no failure mentions %q: the checker missed the planted bug", c.expect)
		})
	}
}

// plantedCase is one of TestPlanted's bugs: where it is planted, and
// what the checker made for it must report.
type plantedCase struct {
	name   string
	cfg    env.Config
	expect string // a substring of some failure
}

// plantedCases are TestPlanted's bugs, one cluster run each.
var plantedCases = []plantedCase{{
	// A grant that skips the predecessor check double-grants; a guard
	// that admits lower tokens lets the stale writes in.
	name:   "admit-lower",
	cfg:    env.Config{Plant: "skip-check", ResourcePlant: "admit-lower", Faults: 1, Classes: []string{"compact"}, Workloads: []string{"mutex"}},
	expect: "fenced register not linearizable",
}, {
	// A guard whose check comes after the write (pgfence's Admit with
	// the write outside its transaction): a holder paused inside its
	// section resumes and writes with its stale token, and the write
	// commits before the check refuses it. The audit committed with
	// the write shows it.
	name:   "check-after-write",
	cfg:    env.Config{Guard: "pg", WorkerPlant: "check-after-write", Faults: 1, Classes: []string{"pause-use"}, Workloads: []string{"mutex"}, PerWorkload: 3},
	expect: "fenced register admitted a stale write",
}, {
	// The same behind redisfence: a plain SET, then Admit (its
	// limit: only Set checks and writes in one script). The AOF
	// shows the write.
	name:   "check-after-write-redis",
	cfg:    env.Config{Guard: "redis", WorkerPlant: "check-after-write", Faults: 1, Classes: []string{"pause-use"}, Workloads: []string{"mutex"}, PerWorkload: 3},
	expect: "fenced register admitted a stale write",
}, {
	// A guard that admits every token behind httpfence's middleware
	// and in the handler's check (the resource's plant admit-lower
	// with the guard http): a paused holder's late write lands.
	name:   "admit-lower-http",
	cfg:    env.Config{Guard: "http", ResourcePlant: "admit-lower", Faults: 1, Classes: []string{"pause-use"}, Workloads: []string{"mutex"}, PerWorkload: 3},
	expect: "fenced register admitted a stale write",
}, {
	name:   "admit-lower-grpc",
	cfg:    env.Config{Guard: "grpc", ResourcePlant: "admit-lower", Faults: 1, Classes: []string{"pause-use"}, Workloads: []string{"mutex"}, PerWorkload: 3},
	expect: "fenced register admitted a stale write",
}, {
	// The same behind s3fence: an unconditional PutObject (the
	// token in its metadata, as Put writes it), then the check of
	// the object's token, which is by then the writer's own. The
	// object's versions show the write.
	name:   "check-after-write-s3",
	cfg:    env.Config{Guard: "s3", WorkerPlant: "check-after-write", Faults: 1, Classes: []string{"pause-use"}, Workloads: []string{"mutex"}, PerWorkload: 3},
	expect: "fenced register admitted a stale write",
}, {
	name:   "skip-check",
	cfg:    env.Config{Plant: "skip-check", Faults: 1, Classes: []string{"compact"}, Workloads: []string{"mutex"}},
	expect: "Done after a successor's grant",
}, {
	// Done closing after the server's expiry: only a holder cut off
	// while it holds shows it, so holders hold until Done. Only a
	// holder on a follower shows it: a holder on the leader goes on
	// being acknowledged until the cut-off leader steps down, and the
	// new leader extends every lease by the election timeout, so the
	// expiry comes after the planted Done. The holder is often on the
	// leader (seen in 1 run of 4 with all 3 faults there): 5 faults.
	name:   "late-done",
	cfg:    env.Config{Plant: "late-done", Faults: 5, Classes: []string{"partition-holder"}, Workloads: []string{"mutex"}, Hold: time.Hour},
	expect: "Done after a successor's grant",
}, {
	// A release that does not check what it deletes: a permit holder's
	// Unlock deletes the queue's head, another holder's key, and a
	// waiter is granted while that holder still acts. (With a Mutex
	// a late Unlock never gets that far: after a pause past the TTL
	// the grant has ended and Unlock deletes nothing.)
	name:   "unguarded-release",
	cfg:    env.Config{Plant: "unguarded-release", Faults: 1, Classes: []string{"compact"}, Workloads: []string{"semaphore"}},
	expect: "Done after a successor's grant",
}, {
	// A TryAcquire that counts one permit too many: a third holder of
	// two permits, while both others act. Every acquire is a try.
	name:   "try-overgrant",
	cfg:    env.Config{Plant: "try-overgrant", Try: 1, Faults: 1, Classes: []string{"compact"}, Workloads: []string{"semaphore"}},
	expect: "Done after a successor's grant",
}, {
	name:   "first-token",
	cfg:    env.Config{WorkerPlant: "first-token", Faults: 1, Classes: []string{"compact"}, Workloads: []string{"mutex"}},
	expect: "token regression",
}, {
	name:   "hold-forever",
	cfg:    env.Config{WorkerPlant: "hold-forever", Faults: 1, Classes: []string{"compact"}, Workloads: []string{"mutex"}},
	expect: "no progress",
}, {
	name:   "leak-key",
	cfg:    env.Config{WorkerPlant: "leak-key", Faults: 1, Classes: []string{"compact"}, Workloads: []string{"mutex"}},
	expect: "nothing left: key dlock/leak/",
}, {
	// An intent journal without its fence: a payments holder paused
	// before its next order resumes after its grant ended and the next
	// holder's Pending raised the mark, and Do writes the intent of a
	// new order all the same (then its charge's claim fails: the state's
	// Txn still checks the grant). etcd's history shows the start.
	name:   "unfenced-intent",
	cfg:    env.Config{Plant: "unfenced-intent", Faults: 2, Classes: []string{"pause-use"}, Workloads: []string{history.PaymentsJournal}, PerWorkload: 2},
	expect: "stale start",
}}
