package fault

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
	"github.com/dlock-go/dlock/integration/cluster/history"
)

// staleLeader SIGSTOPs the etcd leader for longer than the TTL, then
// SIGCONTs it: a leader that resumes believing it still leads.
type staleLeader struct{ always }

func (staleLeader) Name() string                      { return "stale-leader" }
func (staleLeader) Duration(n *Nemesis) time.Duration { return n.pastTTL() }

func (staleLeader) Inject(ctx context.Context, in *injection) (func() error, error) {
	m := in.leader(ctx)
	in.f.Targets = []string{m.Name}
	return m.Resume, m.Pause()
}

// pauseWorker is the family of worker pauses: SIGSTOP a worker that
// reaches phase (waiting in Lock, holding, about to Unlock) within 2
// TTLs, for longer than the TTL, then SIGCONT. A holder is paused
// inside its critical section, where it will not look at Done again
// before it writes (a payments holder: before it reads its next order,
// which it then runs through the journal's Do, the check it relies on).
// pause-use picks an exclusive holder (a Mutex's, a leader's, a payments
// workload's) if one gets there: its successor is granted while it is
// paused inside, which is the double grant the unfenced control must
// see.
type pauseWorker struct {
	name  string
	phase string // the worker's step: "acquire", "inside" or "release"
}

func (c pauseWorker) Available(*env.Harness) (bool, string) { return true, "" }
func (c pauseWorker) Name() string                          { return c.name }
func (c pauseWorker) Duration(n *Nemesis) time.Duration     { return n.pastTTL() }

func (c pauseWorker) Inject(ctx context.Context, in *injection) (func() error, error) {
	ttl := in.h.Cfg.TTL
	only := func(w *env.Worker) bool {
		return c.phase != "inside" || w.Workload == "mutex" || w.Workload == "election" || history.IsPayments(w.Workload)
	}
	w := in.awaitPhase(ctx, c.phase, in.pick, 2*ttl, only)
	if w == nil {
		w = in.awaitPhase(ctx, c.phase, in.pick, 2*ttl, nil)
	}
	if w == nil {
		in.f.Note = "skipped: no worker reached that step"
		return nil, nil
	}
	in.f.Targets = []string{fmt.Sprintf("w%d", w.ID)}
	in.f.Workers = []int{w.ID}
	in.f.Note = w.Workload
	if err := w.Proc.Signal(syscall.SIGSTOP); err != nil {
		return nil, err
	}
	in.f.Stopped = time.Now().UnixNano()
	return func() error { return w.Proc.Signal(syscall.SIGCONT) }, nil
}
