package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The etcd fault classes. Targets are chosen by role when the fault
// begins (the leader, the member a holder is pinned to, a worker in a given
// step), so a replay of a seed injects the same classes with the same
// durations in the same order, aimed at whoever has that role then.
var EtcdClasses = []string{
	"partition-minority", // a follower cut off from the others
	"partition-leader",   // the leader cut off; its clients stay pinned to it
	"partition-holder",   // the member a lock holder talks to cut off
	"partition-oneway",   // the leader's packets to the others dropped, not theirs to it
	"partition-bridge",   // m0 and m2 cannot talk; m1 hears both
	"loss",               // 30% of packets between members dropped
	"slow",               // the leader's sends squeezed to 256 kbit/s
	"kill",               // SIGKILL a member (the leader half the time), restart later
	"crash-lose",         // SIGKILL a member and drop its unsynced writes (power loss)
	"stale-leader",       // SIGSTOP the leader for longer than the TTL, then SIGCONT
	"pause-acquire",      // SIGSTOP a worker waiting in Lock, for longer than the TTL
	"pause-use",          // SIGSTOP a worker while it holds, for longer than the TTL
	"pause-release",      // SIGSTOP a worker about to Unlock, for longer than the TTL
	"compact",            // compact the store at its current revision, under load
	"snapshot",           // a follower cut off while 300 writes pass, so it catches up from a snapshot
	"clock-slow",         // a worker whose local deadlines run on a clock at half speed
	"clock-fast",         // a worker whose local deadlines run on a clock at double speed
}

// Fault is one injected fault, as the run's schedule.json records it.
type Fault struct {
	N       int      `json:"n"`
	Class   string   `json:"class"`
	Start   int64    `json:"start"` // Unix ns: when it began
	Heal    int64    `json:"heal"`  // Unix ns: when it was healed
	Targets []string `json:"targets,omitempty"`
	Workers []int    `json:"workers,omitempty"` // workers paused or on a fault clock (their IDs)
	Note    string   `json:"note,omitempty"`
	Err     string   `json:"err,omitempty"`
}

// nemesis injects faults into a harness, from a seeded PRNG.
type nemesis struct {
	h   *Harness
	rng *rand.Rand
	log func(format string, args ...any)
}

// duration draws a fault's length: between lo and hi multiples of the TTL.
func (n *nemesis) duration(lo, hi float64) time.Duration {
	ttl := float64(n.h.Cfg.TTL)
	return time.Duration(ttl*lo + n.rng.Float64()*ttl*(hi-lo))
}

// inject runs fault f of class: it begins the fault, waits its length
// (drawn from the PRNG) and heals it. The PRNG is drawn the same number of
// times whatever happens, so a seed's schedule does not depend on timing.
func (n *nemesis) inject(ctx context.Context, f *Fault) {
	h := n.h
	pick := n.rng.IntN(1 << 20)
	var d time.Duration
	switch f.Class {
	case "kill", "crash-lose":
		d = n.duration(0.5, 2)
	case "stale-leader":
		d = h.Cfg.TTL + time.Second + n.duration(0, 1)
	case "pause-acquire", "pause-use", "pause-release":
		d = h.Cfg.TTL + time.Second + n.duration(0, 1)
	case "compact":
		d = 0
	case "resource-kill":
		d = n.duration(0.5, 1)
	case "resource-stall":
		d = h.Cfg.TTL + time.Second + n.duration(0, 1)
	case "resource-cut":
		d = n.duration(1, 2)
	default:
		d = n.duration(1, 3)
	}
	n.hold(ctx, f, d, func() (func() error, error) { return n.begin(ctx, f, pick) })
}

// hold begins fault f, keeps it for d and heals it, recording when and
// what failed.
func (n *nemesis) hold(ctx context.Context, f *Fault, d time.Duration, begin func() (heal func() error, err error)) {
	f.Start = time.Now().UnixNano()
	heal, err := begin()
	if err != nil {
		f.Err = err.Error()
	}
	n.log("fault %d %s begins: %s %s (for %v)", f.N, f.Class, strings.Join(f.Targets, ","), f.Note, d.Round(time.Millisecond))
	sleep(ctx, d)
	if heal != nil {
		if err := heal(); err != nil {
			f.Err = strings.TrimPrefix(f.Err+"; heal: "+err.Error(), "; ")
		}
	}
	f.Heal = time.Now().UnixNano()
	n.log("fault %d %s healed%s", f.N, f.Class, errSuffix(f.Err))
}

func errSuffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// begin starts the fault and returns how to heal it.
func (n *nemesis) begin(ctx context.Context, f *Fault, pick int) (func() error, error) {
	h := n.h
	ms := h.Etcd.Members
	nt := h.Net
	cut := func(m *Member) error {
		var errs []error
		for _, o := range ms {
			if o != m {
				errs = append(errs, nt.Drop(m.Host, o.Host))
			}
		}
		return errors.Join(errs...)
	}
	leader := func() *Member {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := h.Etcd.Leader(lctx)
		if err != nil {
			return ms[pick%len(ms)]
		}
		return l
	}
	follower := func(l *Member) *Member {
		var fs []*Member
		for _, m := range ms {
			if m != l {
				fs = append(fs, m)
			}
		}
		return fs[pick%len(fs)]
	}
	switch f.Class {
	case "partition-minority":
		m := follower(leader())
		f.Targets = []string{m.Name}
		return nt.Heal, cut(m)
	case "partition-leader":
		m := leader()
		f.Targets = []string{m.Name}
		return nt.Heal, cut(m)
	case "partition-holder":
		w := n.awaitPhase(ctx, "inside", pick, h.Cfg.TTL, nil)
		m := leader()
		if w != nil {
			m = w.Member
			f.Note = fmt.Sprintf("holder w%d (%s)", w.ID, w.Workload)
		}
		f.Targets = []string{m.Name}
		return nt.Heal, cut(m)
	case "partition-oneway":
		m := leader()
		f.Targets = []string{m.Name}
		var errs []error
		for _, o := range ms {
			if o != m {
				errs = append(errs, nt.DropOneWay(m.Host, o.Host))
			}
		}
		return nt.Heal, errors.Join(errs...)
	case "partition-bridge":
		f.Targets = []string{ms[0].Name, ms[2].Name}
		return nt.Heal, nt.Drop(ms[0].Host, ms[2].Host)
	case "loss":
		var errs []error
		for i := range ms {
			for j := i + 1; j < len(ms); j++ {
				errs = append(errs, nt.Lose(ms[i].Host, ms[j].Host, 0.3))
			}
		}
		return nt.Heal, errors.Join(errs...)
	case "slow":
		m := leader()
		f.Targets = []string{m.Name}
		return nt.Heal, nt.Slow(m.Host, "256kbit")
	case "kill", "crash-lose":
		m := follower(leader())
		if pick%2 == 0 {
			m = leader()
		}
		f.Targets = []string{m.Name}
		if f.Class == "kill" {
			m.Kill()
		} else {
			f.Note = fmt.Sprintf("%d bytes unsynced lost", m.KillLose(2*time.Second))
		}
		return m.Start, nil
	case "stale-leader":
		m := leader()
		f.Targets = []string{m.Name}
		return m.Resume, m.Pause()
	case "pause-acquire", "pause-use", "pause-release":
		// A holder is paused inside its critical section, where it will not
		// look at Done again before it writes.
		// pause-use picks an exclusive holder (a Mutex's, a leader's):
		// its successor is granted while it is paused inside, which is
		// the double grant the unfenced control must see.
		phase := map[string]string{"pause-acquire": "acquire", "pause-use": "inside", "pause-release": "release"}[f.Class]
		only := func(w *Worker) bool { return phase != "inside" || w.Workload == "mutex" || w.Workload == "election" }
		w := n.awaitPhase(ctx, phase, pick, 2*h.Cfg.TTL, only)
		if w == nil {
			w = n.awaitPhase(ctx, phase, pick, 2*h.Cfg.TTL, nil)
		}
		if w == nil {
			f.Note = "skipped: no worker reached that step"
			return nil, nil
		}
		f.Targets = []string{fmt.Sprintf("w%d", w.ID)}
		f.Workers = []int{w.ID}
		f.Note = w.Workload
		if err := w.Proc.Signal(syscall.SIGSTOP); err != nil {
			return nil, err
		}
		return func() error { return w.Proc.Signal(syscall.SIGCONT) }, nil
	case "compact":
		return nil, n.compact(ctx, f)
	case "resource-kill", "resource-stall", "resource-cut":
		return n.resourceFault(ctx, f, pick) // nemesis_guard.go
	case "snapshot":
		m := follower(leader())
		f.Targets = []string{m.Name}
		before := snapshotsReceived(m)
		if err := cut(m); err != nil {
			return nt.Heal, err
		}
		if err := n.churn(ctx, 300, m); err != nil {
			return nt.Heal, err
		}
		return func() error {
			if err := nt.Heal(); err != nil {
				return err
			}
			err := n.caughtUp(ctx, m, f)
			f.Note += fmt.Sprintf("; snapshots received %v → %v", before, snapshotsReceived(m))
			return err
		}, nil
	case "clock-slow", "clock-fast":
		rate := 0.5
		if f.Class == "clock-fast" {
			rate = 2
		}
		ws := h.Workers()
		old := ws[pick%len(ws)]
		w, err := n.restart(old, rate)
		if err != nil {
			return nil, err
		}
		f.Targets = []string{fmt.Sprintf("w%d", w.ID)}
		f.Workers = []int{old.ID, w.ID}
		f.Note = fmt.Sprintf("%s at rate %v", w.Workload, rate)
		return func() error {
			nw, err := n.restart(w, 0)
			if nw != nil {
				f.Workers = append(f.Workers, nw.ID)
			}
			return err
		}, nil
	}
	return nil, fmt.Errorf("unknown fault class %q", f.Class)
}

// restart replaces worker w with a new process in its slot at clock rate
// rate (the old one releases what it holds and exits first).
func (n *nemesis) restart(w *Worker, rate float64) (*Worker, error) {
	if err := w.Proc.Stop(2*n.h.Cfg.TTL + 5*time.Second); err != nil {
		n.log("restart w%d: %v", w.ID, err)
	}
	return n.h.StartWorker(w.Workload, w.Slot, rate)
}

// awaitPhase returns a live worker (one that only accepts, if only is not
// nil) that enters phase within wait, starting the search at worker pick;
// nil if none does.
func (n *nemesis) awaitPhase(ctx context.Context, phase string, pick int, wait time.Duration, only func(*Worker) bool) *Worker {
	ws := slices.DeleteFunc(n.h.Workers(), func(w *Worker) bool { return only != nil && !only(w) })
	return awaitWorker(ctx, ws, pick, wait, func(w *Worker, p string, _ int) bool { return p == phase })
}

// awaitWorker returns the first of ws, searched from the pick-th, that is
// alive and whose phase (and grant number) match, waiting for phase
// changes up to wait; nil if none matches by then.
func awaitWorker(ctx context.Context, ws []*Worker, pick int, wait time.Duration, match func(w *Worker, phase string, g int) bool) *Worker {
	if len(ws) == 0 {
		return nil
	}
	deadline := time.After(wait)
	for {
		chs := make([]<-chan struct{}, 0, len(ws))
		for i := range ws {
			w := ws[(pick+i)%len(ws)]
			ch := w.changed()
			if p, g := w.Phase(); match(w, p, g) {
				select {
				case <-w.Proc.Done():
				default:
					return w
				}
			}
			chs = append(chs, ch)
		}
		if !waitAny(ctx, deadline, chs) {
			return nil
		}
	}
}

// waitAny waits for one of chs to close; false if ctx or deadline ends
// first.
func waitAny(ctx context.Context, deadline <-chan time.Time, chs []<-chan struct{}) bool {
	any := make(chan struct{})
	stop := make(chan struct{})
	defer close(stop)
	for _, ch := range chs {
		go func() {
			select {
			case <-ch:
				select {
				case any <- struct{}{}:
				case <-stop:
				}
			case <-stop:
			}
		}()
	}
	select {
	case <-any:
		return true
	case <-deadline:
	case <-ctx.Done():
	}
	return false
}

// compact compacts the store at its current revision.
func (n *nemesis) compact(ctx context.Context, f *Fault) error {
	cli, err := n.h.Etcd.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.Get(cctx, "nemesis/compact")
	if err != nil {
		return err
	}
	f.Note = fmt.Sprintf("at revision %d", resp.Header.Revision)
	_, err = cli.Compact(cctx, resp.Header.Revision, clientv3.WithCompactPhysical())
	return err
}

// churn makes count writes under nemesis/ (each key deleted again),
// through the members other than cut, so that cut falls further behind than the leader's
// log keeps (--snapshot-count=200, 50 entries kept for catch-up).
func (n *nemesis) churn(ctx context.Context, count int, cut *Member) error {
	cli, err := n.h.Etcd.Client(cut)
	if err != nil {
		return err
	}
	defer cli.Close()
	for i := range count {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		key := fmt.Sprintf("nemesis/churn/%d", i/2%10) // put, then delete
		var err error
		if i%2 == 0 {
			_, err = cli.Put(cctx, key, "x")
		} else {
			_, err = cli.Delete(cctx, key)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("churn %d: %w", i, err)
		}
	}
	return nil
}

// caughtUp waits (up to 20 s) until m's applied revision reaches the
// leader's, and notes how long that took.
func (n *nemesis) caughtUp(ctx context.Context, m *Member, f *Fault) error {
	cli, err := n.h.Etcd.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	resp, err := cli.Get(cctx, "nemesis/rev")
	if err != nil {
		return err
	}
	for {
		st, err := cli.Status(cctx, m.Endpoint())
		if err == nil && st.Header.Revision >= resp.Header.Revision {
			f.Note = fmt.Sprintf("caught up to revision %d in %v", st.Header.Revision, time.Since(start).Round(time.Millisecond))
			return nil
		}
		select {
		case <-cctx.Done():
			return fmt.Errorf("%s did not catch up: %v", m.Name, cctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// snapshotsReceived reads the member's count of snapshots received from
// its metrics (etcd_network_snapshot_receive_success); -1 if unreadable.
func snapshotsReceived(m *Member) float64 {
	cl := &http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get(m.Endpoint() + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "etcd_network_snapshot_receive_success") {
			if f := strings.Fields(line); len(f) == 2 {
				v, _ := strconv.ParseFloat(f[1], 64)
				sum += v
			}
		}
	}
	return sum
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
