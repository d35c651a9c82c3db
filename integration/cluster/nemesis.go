package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
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
	"partition-bridge",   // two halves of the members cannot talk; the middle member hears both
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
	"move-leader",        // leadership transferred (MoveLeader, at the leader) to a follower, under load
	"disk-stall",         // a member's fsyncs hang for 1 to 3 TTL (the leader half the time; needs Lossy)
	"member-replace",     // a member (the leader half the time) removed, wiped, added back empty, restarted
}

// Fault is one injected fault, as the run's schedule.json records it.
type Fault struct {
	N       int      `json:"n"`
	Class   string   `json:"class"`
	Start   int64    `json:"start"` // Unix ns: when it began
	Heal    int64    `json:"heal"`  // Unix ns: when it was healed
	Targets []string `json:"targets,omitempty"`
	Workers []int    `json:"workers,omitempty"` // workers paused or on a fault clock (their IDs)
	Stopped int64    `json:"stopped,omitempty"` // pause-*: Unix ns when SIGSTOP was sent (Start is when the fault began looking for its target)
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
	case "kill", "crash-lose", "member-replace":
		d = n.duration(0.5, 2)
	case "stale-leader":
		d = h.Cfg.TTL + time.Second + n.duration(0, 1)
	case "pause-acquire", "pause-use", "pause-release":
		d = h.Cfg.TTL + time.Second + n.duration(0, 1)
	case "compact", "move-leader":
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
		// The members but the middle one in two halves that cannot talk:
		// each half and the bridge make a quorum (m0 | m1 | m2 with 3;
		// m0,m1 | m2 | m3,m4 with 5).
		b := len(ms) / 2
		var errs []error
		for i := range b {
			for j := b + 1; j < len(ms); j++ {
				f.Targets = append(f.Targets, ms[i].Name+"/"+ms[j].Name)
				errs = append(errs, nt.Drop(ms[i].Host, ms[j].Host))
			}
		}
		f.Note = "bridge " + ms[b].Name
		return nt.Heal, errors.Join(errs...)
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
		f.Stopped = time.Now().UnixNano()
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
			// A minute: in a 5-member campaign run on a loaded machine the
			// leader sent the snapshot 27 s after the heal.
			caught, err := n.caughtUp(ctx, m, time.Minute)
			f.Note = fmt.Sprintf("%s; snapshots received %v → %v", caught, before, snapshotsReceived(m))
			return err
		}, nil
	case "move-leader":
		l := leader()
		t := follower(l)
		f.Targets = []string{l.Name, t.Name}
		return nil, n.moveLeader(ctx, f, l, t)
	case "disk-stall":
		l := leader()
		m := follower(l)
		if pick%2 == 0 {
			m = l
		}
		unstall, ok := m.Stall()
		if !ok {
			f.Note = "skipped: the members' disks are not lossy"
			return nil, nil
		}
		f.Targets = []string{m.Name}
		role := "follower"
		if m == l {
			role = "leader"
		}
		return func() error {
			during := n.leaders(ctx)
			held := unstall()
			f.Note = fmt.Sprintf("%s %s stalled, %d syncs held; before unstall %s", role, m.Name, held, during)
			lead, err := n.newLeader(ctx, nil, 10*time.Second)
			if err != nil {
				return err
			}
			caught, err := n.caughtUp(ctx, m, time.Minute)
			f.Note += fmt.Sprintf("; after: %s; %s %s", lead, m.Name, caught)
			return err
		}, nil
	case "member-replace":
		l := leader()
		m := follower(l)
		if pick%2 == 0 {
			m = l
		}
		f.Targets = []string{m.Name}
		return n.replace(ctx, f, m, m == l)
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

// caughtUp waits (up to limit) until m's applied revision reaches the
// cluster's, and says how long that took.
func (n *nemesis) caughtUp(ctx context.Context, m *Member, limit time.Duration) (string, error) {
	cli, err := n.h.Etcd.Client()
	if err != nil {
		return "", err
	}
	defer cli.Close()
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	resp, err := cli.Get(cctx, "nemesis/rev")
	if err != nil {
		return "", err
	}
	// m's own client, made again after each failure: a client's
	// connection to a member that was down retries with a backoff (1 s
	// and more) that would count as catch-up time.
	var mcli *clientv3.Client
	defer func() {
		if mcli != nil {
			mcli.Close()
		}
	}()
	for {
		if mcli == nil {
			mcli, err = clientv3.New(clientv3.Config{Endpoints: []string{m.Endpoint()}, DialTimeout: time.Second, Logger: zap.NewNop()})
		}
		var st *clientv3.StatusResponse
		if err == nil {
			sctx, scancel := context.WithTimeout(cctx, time.Second)
			st, err = mcli.Status(sctx, m.Endpoint())
			scancel()
			if err != nil {
				mcli.Close()
				mcli = nil
			}
		}
		if err == nil && st.Header.Revision >= resp.Header.Revision {
			return fmt.Sprintf("caught up to revision %d in %v", st.Header.Revision, time.Since(start).Round(time.Millisecond)), nil
		}
		select {
		case <-cctx.Done():
			return fmt.Sprintf("not caught up after %v", limit), fmt.Errorf("%s did not catch up: %v", m.Name, cctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// leaders says which leader each member reports now, and in which term:
// "m0:m2/7 m1:m2/7 m2:m2/7" ("m1:-" for a member that did not answer
// within 500 ms, "none" for no leader, "?" for one not identified).
func (n *nemesis) leaders(ctx context.Context) string {
	cli, err := n.h.Etcd.Client()
	if err != nil {
		return err.Error()
	}
	defer cli.Close()
	// Each member's ID from its own status; the member list (which a
	// stalled member may keep from answering) only for the silent ones.
	ids := map[uint64]*Member{}
	sts := map[*Member]*clientv3.StatusResponse{}
	for _, m := range n.h.Etcd.Members {
		sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		st, err := cli.Status(sctx, m.Endpoint())
		cancel()
		if err == nil {
			sts[m] = st
			ids[st.Header.MemberId] = m
		}
	}
	if len(sts) < len(n.h.Etcd.Members) {
		listed, _ := n.ids(ctx, cli) // a name unknown shows as "?"
		maps.Copy(ids, listed)
	}
	var out []string
	for _, m := range n.h.Etcd.Members {
		st := sts[m]
		if st == nil {
			out = append(out, m.Name+":-")
			continue
		}
		name := "?"
		if lm := ids[st.Leader]; lm != nil {
			name = lm.Name
		} else if st.Leader == 0 {
			name = "none"
		}
		out = append(out, fmt.Sprintf("%s:%s/%d", m.Name, name, st.RaftTerm))
	}
	return strings.Join(out, " ")
}

// ids maps the cluster's member IDs to the members, by name or peer URL.
func (n *nemesis) ids(ctx context.Context, cli clientv3.Cluster) (map[uint64]*Member, error) {
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := cli.MemberList(lctx)
	if err != nil {
		return nil, err
	}
	ids := map[uint64]*Member{}
	for _, mm := range resp.Members {
		for _, m := range n.h.Etcd.Members {
			if mm.Name == m.Name || slices.Contains(mm.PeerURLs, m.PeerURL()) {
				ids[mm.ID] = m
			}
		}
	}
	return ids, nil
}

// newLeader waits (up to limit) until a leader leads that is want (any
// if want is nil), and says who and how long after the call:
// "m2 leads (term 7) 1.2s later".
func (n *nemesis) newLeader(ctx context.Context, want *Member, limit time.Duration) (string, error) {
	start := time.Now()
	lctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		l, err := n.h.Etcd.Leader(lctx)
		if err != nil {
			return "", err
		}
		if want == nil || l == want {
			term := uint64(0)
			if cli, err := n.h.Etcd.Client(); err == nil {
				if st, err := cli.Status(lctx, l.Endpoint()); err == nil {
					term = st.RaftTerm
				}
				cli.Close()
			}
			return fmt.Sprintf("%s leads (term %d) %v later", l.Name, term, time.Since(start).Round(time.Millisecond)), nil
		}
		select {
		case <-lctx.Done():
			return "", fmt.Errorf("%s does not lead after %v: %s does", want.Name, limit, l.Name)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// moveLeader asks leader l (at its own endpoint) to hand leadership to
// t, and waits until t leads.
func (n *nemesis) moveLeader(ctx context.Context, f *Fault, l, t *Member) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{l.Endpoint()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := cli.Status(mctx, t.Endpoint())
	if err != nil {
		return fmt.Errorf("status of %s: %w", t.Name, err)
	}
	start := time.Now()
	if _, err := cli.MoveLeader(mctx, st.Header.MemberId); err != nil {
		return fmt.Errorf("move leader %s → %s: %w", l.Name, t.Name, err)
	}
	moved := time.Since(start)
	lead, err := n.newLeader(ctx, t, 10*time.Second)
	f.Note = fmt.Sprintf("%s → %s (term %d before): MoveLeader returned in %v; %s", l.Name, t.Name, st.RaftTerm, moved.Round(time.Millisecond), lead)
	return err
}

// replace removes member m from the cluster (MemberRemove), kills it,
// wipes its data and adds it back as a new member (MemberAdd, same peer
// URL); the returned heal starts it (--initial-cluster-state=existing)
// and waits up to 30 s until it has caught up.
func (n *nemesis) replace(ctx context.Context, f *Fault, m *Member, wasLeader bool) (func() error, error) {
	cli, err := n.h.Etcd.Client(m)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	role := "follower"
	if wasLeader {
		role = "leader"
	}
	listed, err := n.ids(ctx, cli)
	if err != nil {
		return nil, fmt.Errorf("member list: %w", err)
	}
	var ids []uint64 // more than one if an earlier add of m never started
	for mid, mm := range listed {
		if mm == m {
			ids = append(ids, mid)
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s not in the member list", m.Name)
	}
	slices.Sort(ids)
	id := ids[0]
	start := time.Now()
	for _, mid := range ids {
		if err := removeMember(ctx, cli, mid); err != nil {
			return nil, fmt.Errorf("remove %s (%x): %w", m.Name, mid, err)
		}
	}
	removed := time.Since(start)
	if err := m.Wipe(); err != nil {
		return nil, err
	}
	lead, err := n.newLeader(ctx, nil, 10*time.Second)
	if err != nil {
		return nil, err
	}
	newID, err := addMember(ctx, cli, m.PeerURL())
	if err != nil {
		return nil, fmt.Errorf("add %s back: %w", m.Name, err)
	}
	f.Note = fmt.Sprintf("%s %s (%x) removed in %v, wiped; %s; added back as %x", role, m.Name, id, removed.Round(time.Millisecond), lead, newID)
	return func() error {
		if err := m.Start(); err != nil {
			return err
		}
		caught, err := n.caughtUp(ctx, m, 30*time.Second)
		f.Note += "; restarted empty, " + caught
		return err
	}, nil
}

// removeMember removes member id, retrying for up to 15 s until a member
// list no longer shows it: a removal can be applied and its reply lost
// (the leader changed), and a list that fails says nothing (the campaign
// once took a failed list for "removed", wiped a member still in the
// cluster, and could not add it back: "Peer URLs already exists").
func removeMember(ctx context.Context, cli clientv3.Cluster, id uint64) error {
	return retryUntil(ctx, 15*time.Second, func(rctx context.Context) error {
		resp, err := cli.MemberList(rctx)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(resp.Members, func(mm *etcdserverpb.Member) bool { return mm.ID == id }) {
			return nil
		}
		_, err = cli.MemberRemove(rctx, id)
		return err
	})
}

// addMember adds a member with peerURL and returns its ID, retrying for
// up to 15 s: an add whose reply was lost shows in the member list (the
// URL listed, the member not started: no name), and is taken as done.
func addMember(ctx context.Context, cli clientv3.Cluster, peerURL string) (uint64, error) {
	var id uint64
	err := retryUntil(ctx, 15*time.Second, func(rctx context.Context) error {
		resp, err := cli.MemberList(rctx)
		if err != nil {
			return err
		}
		for _, mm := range resp.Members {
			if slices.Contains(mm.PeerURLs, peerURL) {
				if mm.Name != "" {
					return fmt.Errorf("%s is still a started member (%x)", peerURL, mm.ID)
				}
				id = mm.ID
				return nil
			}
		}
		added, err := cli.MemberAdd(rctx, []string{peerURL})
		if err == nil {
			id = added.Member.ID
		}
		return err
	})
	return id, err
}

// retryUntil calls op (each call bounded by 5 s) until it succeeds or
// limit has passed, 200 ms apart; it returns op's last error.
func retryUntil(ctx context.Context, limit time.Duration, op func(context.Context) error) error {
	end := time.Now().Add(limit)
	for {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := op(octx)
		cancel()
		if err == nil || time.Now().After(end) || ctx.Err() != nil {
			return err
		}
		sleep(ctx, 200*time.Millisecond) // etcd has no event for "ready to reconfigure": retry
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
