package fault

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
)

// ClassesFor returns the resource-side classes guard supports: all of
// GuardClasses, but resource-kill for "http" and "grpc" (their marks are
// in the resource's memory).
func ClassesFor(guard string) []string {
	var out []string
	for _, c := range GuardClasses {
		if c != "resource-kill" || guard != "http" && guard != "grpc" {
			out = append(out, c)
		}
	}
	return out
}

// resourceKill SIGKILLs the guard's server (every process of it) while a
// holder is inside its critical section, and restarts it from its data
// directory when healed (WAL recovery). It lasts 0.5 to 1 TTL. A run
// whose guard keeps its marks in memory ("http", "grpc") cannot have it:
// the fault is an error there.
type resourceKill struct{ always }

func (resourceKill) Name() string                      { return "resource-kill" }
func (resourceKill) Duration(n *Nemesis) time.Duration { return n.duration(0.5, 1) }

func (c resourceKill) Inject(ctx context.Context, in *injection) (func() error, error) {
	h := in.h
	pg, err := in.guard(c.Name())
	if err != nil {
		return nil, err
	}
	if h.Cfg.Guard == "http" || h.Cfg.Guard == "grpc" {
		return nil, fmt.Errorf("%s: the %s guard's marks are in the resource's memory (a fence.MemoryGuard): a kill forgets them", c.Name(), h.Cfg.Guard)
	}
	in.awaitResourceHolder(ctx, "inside")
	in.f.Targets = []string{h.Cfg.Guard}
	pg.Kill()
	return func() error { return pg.Start(ctx) }, nil
}

// resourceStall SIGSTOPs the guard's server while a holder is inside its
// critical section, for longer than the TTL, then SIGCONTs it.
type resourceStall struct{ always }

func (resourceStall) Name() string                      { return "resource-stall" }
func (resourceStall) Duration(n *Nemesis) time.Duration { return n.pastTTL() }

func (c resourceStall) Inject(ctx context.Context, in *injection) (func() error, error) {
	pg, err := in.guard(c.Name())
	if err != nil {
		return nil, err
	}
	in.awaitResourceHolder(ctx, "inside")
	in.f.Targets = []string{in.h.Cfg.Guard}
	return func() error { return pg.Signal(syscall.SIGCONT) }, pg.Signal(syscall.SIGSTOP)
}

// resourceCut cuts the namespace of a holder that is writing the fenced
// register off from the resource's, mid-write. It lasts 1 to 2 TTLs.
type resourceCut struct{ always }

func (resourceCut) Name() string                      { return "resource-cut" }
func (resourceCut) Duration(n *Nemesis) time.Duration { return n.duration(1, 2) }

func (c resourceCut) Inject(ctx context.Context, in *injection) (func() error, error) {
	h := in.h
	if _, err := in.guard(c.Name()); err != nil {
		return nil, err
	}
	w := in.awaitResourceHolder(ctx, "writing")
	if w == nil {
		in.f.Note = "skipped: no holder reached its write"
		return nil, nil
	}
	in.f.Targets = []string{w.Member.Host.Name, h.ResHost.Name}
	return h.Net.Heal, h.Net.Drop(w.Member.Host, h.ResHost)
}

// guard returns the run's guard server; an error if the run has none.
func (in *injection) guard(class string) (env.GuardServer, error) {
	if in.h.Guard == nil {
		return nil, fmt.Errorf("%s needs a guard (Config.Guard)", class)
	}
	return in.h.Guard, nil
}

// awaitResourceHolder waits up to 2 TTLs for a worker in phase (from the
// pick-th) and notes it in the fault; nil if none gets there.
func (in *injection) awaitResourceHolder(ctx context.Context, phase string) *env.Worker {
	w := in.awaitPhase(ctx, phase, in.pick, 2*in.h.Cfg.TTL, nil)
	if w != nil {
		in.f.Note = fmt.Sprintf("holder w%d (%s) %s", w.ID, w.Workload, phase)
	}
	return w
}
