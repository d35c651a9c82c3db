package fault

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
	"github.com/dlock-go/dlock/integration/cluster/history"
)

// paymentsPoint is the family of faults at a step of a payments holder's
// charge (cmd/worker's payments.go): "intent" (the intent written, the
// order claimed, no call made), "call" (the request sent, the API
// processing it) or "outcome" (the reply read, the outcome not recorded).
// There the worker is SIGKILLed, and its slot restarted when healed (0.5
// to 1 TTL later), or SIGSTOPped for longer than the TTL, and SIGCONTed
// when healed.
//
// Every payments workload of the run gets the fault at once, on its
// first worker (searched from the pick-th) that reaches the step within 2
// TTLs: the journal and its controls, side by side, are judged under one
// schedule. A workload none of whose workers gets there is noted, not
// faulted.
type paymentsPoint struct {
	name  string
	phase string // the worker's step: "intent", "call" or "outcome"
	kill  bool   // SIGKILL (else SIGSTOP)
}

func (c paymentsPoint) Name() string { return c.name }

func (c paymentsPoint) Available(h *env.Harness) (bool, string) {
	if !h.Cfg.HasPayments() {
		return false, "no payments workload"
	}
	return true, ""
}

func (c paymentsPoint) Duration(n *Nemesis) time.Duration {
	if c.kill {
		return n.duration(0.5, 1) // the slot's downtime
	}
	return n.pastTTL()
}

func (c paymentsPoint) Inject(ctx context.Context, in *injection) (func() error, error) {
	var (
		mu    sync.Mutex
		hit   []*env.Worker
		notes []string
		errs  []string
		wg    sync.WaitGroup
		ttl   = in.h.Cfg.TTL
		wls   = slices.DeleteFunc(slices.Clone(in.h.Cfg.Workloads), func(wl string) bool { return !history.IsPayments(wl) })
	)
	// Each workload's search signals its worker as soon as it finds it:
	// the worker is at the step only for a moment.
	for _, wl := range wls {
		wg.Go(func() {
			w := in.awaitPhase(ctx, c.phase, in.pick, 2*ttl, func(w *env.Worker) bool { return w.Workload == wl })
			if w == nil {
				mu.Lock()
				notes = append(notes, wl+": none reached "+c.phase)
				mu.Unlock()
				return
			}
			p, g := w.Phase()
			var err error
			if c.kill {
				w.Kill()
			} else {
				err = w.Proc.Signal(syscall.SIGSTOP)
			}
			at := time.Now().UnixNano()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Sprintf("w%d: %v", w.ID, err))
				return
			}
			hit = append(hit, w)
			notes = append(notes, fmt.Sprintf("%s: w%d at %s %d", wl, w.ID, p, g))
			if !c.kill && (in.f.Stopped == 0 || at < in.f.Stopped) {
				in.f.Stopped = at
			}
		})
	}
	wg.Wait()
	slices.SortFunc(hit, func(a, b *env.Worker) int { return a.ID - b.ID })
	slices.Sort(notes)
	for _, w := range hit {
		in.f.Targets = append(in.f.Targets, fmt.Sprintf("w%d", w.ID))
		in.f.Workers = append(in.f.Workers, w.ID)
	}
	in.f.Note = strings.Join(notes, "; ")
	heal := func() error {
		var errs []string
		for _, w := range hit {
			if !c.kill {
				if err := w.Proc.Signal(syscall.SIGCONT); err != nil {
					errs = append(errs, err.Error())
				}
				continue
			}
			nw, err := in.h.StartWorker(w.Workload, w.Slot, 0)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			in.f.Workers = append(in.f.Workers, nw.ID)
		}
		return joinErrs(errs)
	}
	return heal, joinErrs(errs)
}

// joinErrs joins messages into one error (nil for none).
func joinErrs(msgs []string) error {
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(msgs, "; "))
}
