package cluster

import (
	"context"
	"fmt"
	"syscall"
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

// resourceFault begins a resource-side fault (GuardClasses) on the
// guard's server, aimed at a holder inside its critical section (for
// resource-cut: one about to write the fenced register), and returns
// how to heal it.
func (n *nemesis) resourceFault(ctx context.Context, f *Fault, pick int) (func() error, error) {
	h := n.h
	pg := h.Guard
	if pg == nil {
		return nil, fmt.Errorf("%s needs a guard (Config.Guard)", f.Class)
	}
	if f.Class == "resource-kill" && (h.Cfg.Guard == "http" || h.Cfg.Guard == "grpc") {
		return nil, fmt.Errorf("%s: the %s guard's marks are in the resource's memory (a fence.MemoryGuard): a kill forgets them", f.Class, h.Cfg.Guard)
	}
	phase := "inside"
	if f.Class == "resource-cut" {
		phase = "writing"
	}
	w := n.awaitPhase(ctx, phase, pick, 2*h.Cfg.TTL, nil)
	if w != nil {
		f.Note = fmt.Sprintf("holder w%d (%s) %s", w.ID, w.Workload, phase)
	}
	switch f.Class {
	case "resource-kill":
		f.Targets = []string{h.Cfg.Guard}
		pg.Kill()
		return func() error { return pg.Start(ctx) }, nil
	case "resource-stall":
		f.Targets = []string{h.Cfg.Guard}
		return func() error { return pg.Signal(syscall.SIGCONT) }, pg.Signal(syscall.SIGSTOP)
	default: // resource-cut
		if w == nil {
			f.Note = "skipped: no holder reached its write"
			return nil, nil
		}
		f.Targets = []string{w.Member.Host.Name, h.ResHost.Name}
		return h.Net.Heal, h.Net.Drop(w.Member.Host, h.ResHost)
	}
}
