package fault

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
	"github.com/dlock-go/dlock/integration/cluster/history"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Nemesis injects faults into a harness, from a seeded PRNG. It is not
// safe for concurrent use: the runner calls Inject for one fault at a
// time.
type Nemesis struct {
	h       *env.Harness
	rh      *env.RedisHarness // a Redis run's (nil in an etcd run)
	rng     *rand.Rand
	log     func(format string, args ...any)
	classes []faultClass   // the classes it knows
	kind    string         // "" or "Redis ": how an unknown class is called
	turns   map[string]int // faults of each class so far
}

// NewNemesis returns a nemesis for h's etcd classes (etcdFaults,
// guardFaults and paymentsFaults).
func NewNemesis(h *env.Harness, rng *rand.Rand, logf func(string, ...any)) *Nemesis {
	return &Nemesis{h: h, rng: rng, log: logf, classes: slices.Concat(etcdFaults, guardFaults, paymentsFaults), turns: map[string]int{}}
}

// NewRedisNemesis returns a nemesis for rh's Redis classes
// (redisFaults). It draws from the PRNG as the etcd one does (one pick
// and one duration per fault), so that a seed replays the same schedule.
func NewRedisNemesis(rh *env.RedisHarness, rng *rand.Rand, logf func(string, ...any)) *Nemesis {
	return &Nemesis{h: rh.Harness, rh: rh, rng: rng, log: logf, classes: redisFaults, kind: "Redis ", turns: map[string]int{}}
}

// duration draws a fault's length: between lo and hi multiples of the TTL.
func (n *Nemesis) duration(lo, hi float64) time.Duration {
	ttl := float64(n.h.Cfg.TTL)
	return time.Duration(ttl*lo + n.rng.Float64()*ttl*(hi-lo))
}

// pastTTL draws the length of a fault that must outlast the TTL: the TTL
// and a second, and up to a TTL more.
func (n *Nemesis) pastTTL() time.Duration {
	return n.h.Cfg.TTL + time.Second + n.duration(0, 1)
}

// class returns the class called name; nil if n knows none.
func (n *Nemesis) class(name string) faultClass {
	for _, c := range n.classes {
		if c.Name() == name {
			return c
		}
	}
	return nil
}

// Inject runs fault f of class: it begins the fault, waits its length
// (drawn from the PRNG) and heals it. The PRNG is drawn the same number of
// times whatever happens (a pick, then the class's Duration), so a seed's
// schedule does not depend on timing.
func (n *Nemesis) Inject(ctx context.Context, f *history.Fault) {
	pick := n.rng.IntN(1 << 20)
	c := n.class(f.Class)
	var d time.Duration
	if c != nil {
		d = c.Duration(n)
	} else {
		d = n.duration(1, 3)
	}
	turn := n.turns[f.Class]
	n.turns[f.Class]++
	n.hold(ctx, f, d, func() (func() error, error) { return n.begin(ctx, c, f, pick, turn) })
}

// begin begins fault f of class c, unless c is unknown or not available,
// and returns how to heal it.
func (n *Nemesis) begin(ctx context.Context, c faultClass, f *history.Fault, pick, turn int) (func() error, error) {
	if c == nil {
		return nil, fmt.Errorf("unknown %sfault class %q", n.kind, f.Class)
	}
	if ok, reason := c.Available(n.h); !ok {
		f.Note = "skipped: " + reason
		return nil, nil
	}
	return c.Inject(ctx, &injection{Nemesis: n, f: f, pick: pick, turn: turn})
}

// hold begins fault f, keeps it for d and heals it, recording when and
// what failed.
func (n *Nemesis) hold(ctx context.Context, f *history.Fault, d time.Duration, begin func() (heal func() error, err error)) {
	f.Start = time.Now().UnixNano()
	heal, err := begin()
	if err != nil {
		f.Err = err.Error()
	}
	n.log("fault %d %s begins: %s %s (for %v)", f.N, f.Class, strings.Join(f.Targets, ","), f.Note, d.Round(time.Millisecond))
	env.Sleep(ctx, d)
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

// awaitPhase returns a live worker (one that only accepts, if only is not
// nil) that enters phase within wait, starting the search at worker pick;
// nil if none does.
func (n *Nemesis) awaitPhase(ctx context.Context, phase string, pick int, wait time.Duration, only func(*env.Worker) bool) *env.Worker {
	ws := slices.DeleteFunc(n.h.Workers(), func(w *env.Worker) bool { return only != nil && !only(w) })
	return awaitWorker(ctx, ws, pick, wait, func(w *env.Worker, p string, _ int) bool { return p == phase })
}

// awaitWorker returns the first of ws, searched from the pick-th, that is
// alive and whose phase (and grant number) match, waiting for phase
// changes up to wait; nil if none matches by then.
func awaitWorker(ctx context.Context, ws []*env.Worker, pick int, wait time.Duration, match func(w *env.Worker, phase string, g int) bool) *env.Worker {
	if len(ws) == 0 {
		return nil
	}
	deadline := time.After(wait)
	for {
		chs := make([]<-chan struct{}, 0, len(ws))
		for i := range ws {
			w := ws[(pick+i)%len(ws)]
			ch := w.Changed()
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

// stillHolds waits d and reports whether w held its grant g throughout.
func stillHolds(ctx context.Context, w *env.Worker, g int, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		ch := w.Changed()
		if p, now := w.Phase(); !holding(p) || now != g {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-w.Proc.Done():
			return false
		case <-t.C:
			return true
		case <-ch:
		}
	}
}

// grantsNow returns, per worker ID, the number of its last grant made:
// the grant it holds or has just released, or, while it acquires, the one
// before (the pending one is not made yet).
func grantsNow(ws []*env.Worker) map[int]int {
	out := make(map[int]int, len(ws))
	for _, w := range ws {
		p, g := w.Phase()
		if p == "acquire" {
			g--
		}
		out[w.ID] = g
	}
	return out
}

// awaitRedisWorker returns a live worker of workload wl in phase (a holder:
// "use" means "use" or "inside"), with a grant numbered above since[its
// ID], within wait, starting the search at its pick-th worker; nil if
// none does. A nil since accepts any grant.
func (n *Nemesis) awaitRedisWorker(ctx context.Context, wl, phase string, since map[int]int, pick int, wait time.Duration) *env.Worker {
	ws := slices.DeleteFunc(n.h.Workers(), func(w *env.Worker) bool { return w.Workload != wl })
	return awaitWorker(ctx, ws, pick, wait, func(w *env.Worker, p string, g int) bool {
		return (p == phase || phase == "use" && holding(p)) && g > since[w.ID]
	})
}

// holding tells whether a worker in phase holds its grant: it uses it
// ("use"), or is inside its critical section ("inside").
func holding(phase string) bool { return phase == "use" || phase == "inside" }

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

// caughtUp waits (up to limit) until m's applied revision reaches the
// cluster's, and says how long that took.
func (n *Nemesis) caughtUp(ctx context.Context, m *env.Member, limit time.Duration) (string, error) {
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
func (n *Nemesis) leaders(ctx context.Context) string {
	cli, err := n.h.Etcd.Client()
	if err != nil {
		return err.Error()
	}
	defer cli.Close()
	// Each member's ID from its own status; the member list (which a
	// stalled member may keep from answering) only for the silent ones.
	ids := map[uint64]*env.Member{}
	sts := map[*env.Member]*clientv3.StatusResponse{}
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
func (n *Nemesis) ids(ctx context.Context, cli clientv3.Cluster) (map[uint64]*env.Member, error) {
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := cli.MemberList(lctx)
	if err != nil {
		return nil, err
	}
	ids := map[uint64]*env.Member{}
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
func (n *Nemesis) newLeader(ctx context.Context, want *env.Member, limit time.Duration) (string, error) {
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

// snapshotsReceived reads the member's count of snapshots received from
// its metrics (etcd_network_snapshot_receive_success); -1 if unreadable.
func snapshotsReceived(m *env.Member) float64 {
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
