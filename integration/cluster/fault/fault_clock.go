package fault

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
)

// workerClock is the family of worker clock faults: a worker is restarted
// in its slot with its local deadlines on a clock at rate times the real
// one, and restarted on the real clock when healed. Each lasts 1 to 3
// TTLs.
type workerClock struct {
	name string
	rate float64
}

func (c workerClock) Available(*env.Harness) (bool, string) { return true, "" }
func (c workerClock) Name() string                          { return c.name }
func (c workerClock) Duration(n *Nemesis) time.Duration     { return n.duration(1, 3) }

func (c workerClock) Inject(_ context.Context, in *injection) (func() error, error) {
	ws := in.h.Workers()
	old := ws[in.pick%len(ws)]
	w, err := in.restart(old, c.rate)
	if err != nil {
		return nil, err
	}
	in.f.Targets = []string{fmt.Sprintf("w%d", w.ID)}
	in.f.Workers = []int{old.ID, w.ID}
	in.f.Note = fmt.Sprintf("%s at rate %v", w.Workload, c.rate)
	return func() error {
		nw, err := in.restart(w, 0)
		if nw != nil {
			in.f.Workers = append(in.f.Workers, nw.ID)
		}
		return err
	}, nil
}

// restart replaces worker w with a new process in its slot at clock rate
// rate (the old one releases what it holds and exits first).
func (n *Nemesis) restart(w *env.Worker, rate float64) (*env.Worker, error) {
	if err := w.Proc.Stop(2*n.h.Cfg.TTL + 5*time.Second); err != nil {
		n.log("restart w%d: %v", w.ID, err)
	}
	return n.h.StartWorker(w.Workload, w.Slot, rate)
}
