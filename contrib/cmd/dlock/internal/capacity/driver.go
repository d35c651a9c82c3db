package capacity

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
)

// driver runs the scenarios on one cluster.
type driver struct {
	o       Options
	cfg     dlock.Config
	cli     *clientv3.Client
	hc      *http.Client
	members []member
	token   string // makes this run's key names unique
	seq     int
}

// member is one etcd member: its ID and first client URL.
type member struct {
	id  uint64
	url string
}

// Run runs o's scenarios against the etcd cluster o.DSN names and returns
// their report. On an error it returns the rows finished so far with it.
func Run(ctx context.Context, o Options) (*Report, error) {
	o = o.withDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	cfg, err := dlock.ParseDSN(o.DSN)
	if err != nil {
		return nil, fmt.Errorf("capacity: %w", err)
	}
	if cfg.Backend != dlock.BackendEtcd {
		return nil, fmt.Errorf("capacity: %s: the capacity scenarios need etcd", cfg.Backend)
	}
	dc, err := dlock.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("capacity: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = dc.Close(cctx)
	}()
	d := &driver{o: o, cfg: dc.Config(), cli: dc.Source().Client(), token: strconv.FormatInt(time.Now().UnixNano()%1e9, 36)}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if d.cfg.TLS != nil {
		tr.TLSClientConfig = d.cfg.TLS.Clone()
	}
	d.hc = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	defer tr.CloseIdleConnections()
	rep := &Report{Version: 1, Started: time.Now().UTC().Format(time.RFC3339), Config: o.info()}
	if err := d.discover(ctx, rep); err != nil {
		return nil, err
	}
	for _, s := range o.Scenarios {
		for _, load := range o.loads(s) {
			for _, impl := range o.Impls {
				rows, err := d.rows(ctx, s, load, impl)
				rep.Rows = append(rep.Rows, rows...)
				if err != nil {
					return rep, fmt.Errorf("capacity: %s %s=%d %s: %w", s, infoOf(s).load, load, impl, err)
				}
			}
		}
	}
	return rep, nil
}

func (o Options) loads(s string) []int {
	switch s {
	case "a":
		return o.Inflight
	case "b":
		return o.Held
	case "c":
		return o.Waiters
	case "d":
		return o.Sessions
	case "e":
		return o.Expire
	}
	return o.FailoverSessions
}

func (o Options) info() ConfigInfo {
	f := "move-leader"
	switch {
	case o.Failover != nil:
		f = "callback"
	case o.FailoverCmd != "":
		f = "cmd"
	}
	return ConfigInfo{
		Scenarios: o.Scenarios, Impls: o.Impls, Inflight: o.Inflight, Held: o.Held, HeldSessions: o.HeldSessions,
		Extra: o.Extra, Waiters: o.Waiters, HerdMax: o.HerdMax, Sessions: o.Sessions, Expire: o.Expire,
		FailoverSessions: o.FailoverSessions, Runs: o.Runs, Procs: o.Procs, Clients: o.Clients,
		TTLSeconds: o.TTL.Seconds(), WindowSeconds: o.Window.Seconds(), DurationSeconds: o.Duration.Seconds(), Failover: f,
	}
}

// discover lists the members and the cluster's version.
func (d *driver) discover(ctx context.Context, rep *Report) error {
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ml, err := d.cli.MemberList(mctx)
	if err != nil {
		return fmt.Errorf("capacity: member list: %w", err)
	}
	for _, m := range ml.Members {
		if len(m.ClientURLs) == 0 {
			continue
		}
		d.members = append(d.members, member{id: m.ID, url: m.ClientURLs[0]})
	}
	rep.Cluster = ClusterInfo{Endpoints: d.cfg.Endpoints, Members: len(ml.Members)}
	for _, m := range d.members {
		if st, err := d.cli.Status(mctx, m.url); err == nil {
			rep.Cluster.EtcdVersion = st.Version
			break
		}
	}
	return nil
}

// result is one run's metrics for one variant of a row.
type result struct {
	variant string
	m       map[string]float64
	note    string
}

// rows runs one row o.Runs times and returns its medians, one row per
// variant.
func (d *driver) rows(ctx context.Context, s string, load int, impl string) ([]Row, error) {
	var order []string
	byVariant := map[string]*Row{}
	vals := map[string]map[string][]float64{}
	for run := 1; run <= d.o.Runs; run++ {
		if d.o.Progress != nil {
			fmt.Fprintf(d.o.Progress, "capacity: %s %s=%d %s run %d/%d ...\n", s, infoOf(s).load, load, impl, run, d.o.Runs)
		}
		start := time.Now()
		rs, err := d.run(ctx, s, load, impl)
		if err != nil {
			return nil, err
		}
		if d.o.Progress != nil {
			fmt.Fprintf(d.o.Progress, "capacity: %s %s=%d %s run %d/%d done in %.1fs\n", s, infoOf(s).load, load, impl, run, d.o.Runs, time.Since(start).Seconds())
		}
		for _, r := range rs {
			row, ok := byVariant[r.variant]
			if !ok {
				row = &Row{Scenario: s, Load: load, Variant: r.variant, Impl: impl, Metrics: map[string]float64{}}
				byVariant[r.variant], vals[r.variant] = row, map[string][]float64{}
				order = append(order, r.variant)
			}
			row.Runs++
			row.Note = r.note
			for k, v := range r.m {
				if !math.IsNaN(v) && !math.IsInf(v, 0) {
					vals[r.variant][k] = append(vals[r.variant][k], v)
				}
			}
		}
	}
	var out []Row
	for _, v := range order {
		row := byVariant[v]
		for k, xs := range vals[v] {
			row.Metrics[k] = median(xs)
		}
		out = append(out, *row)
	}
	return out, nil
}

func (d *driver) run(ctx context.Context, s string, load int, impl string) ([]result, error) {
	d.seq++
	u := unit{d: d, impl: impl, name: fmt.Sprintf("%s%04d", s, d.seq), root: "dlock-capacity/" + d.token + "/" + impl}
	defer func() { u.ps.close() }() // the workers spawned by the run
	switch s {
	case "a":
		return u.throughput(ctx, load)
	case "b":
		return u.held(ctx, load)
	case "c":
		return u.waiters(ctx, load)
	case "d":
		return u.sessions(ctx, load)
	case "e":
		return u.expiry(ctx, load)
	}
	return u.failover(ctx, load)
}

// unit is one run of one scenario for one implementation: its workers
// and its key names.
type unit struct {
	d    *driver
	impl string
	name string // unique lock name (prefix) of the run
	root string // the implementation's key prefix
	ps   procs
}

// split divides n into parts as even as possible (no zero part unless
// n < parts, whose parts are then dropped).
func split(n, parts int) []int {
	var out []int
	for i := range parts {
		k := n / parts
		if i < n%parts {
			k++
		}
		if k > 0 {
			out = append(out, k)
		}
	}
	return out
}

// spawn starts one worker per entry of sessions, each opening that many
// sessions; it returns them, also appended to u.ps for closing.
func (u *unit) spawn(ctx context.Context, sessions []int) (procs, error) {
	var ps procs
	for range sessions {
		p, err := startProc(u.d.o.Worker)
		if err != nil {
			return ps, err
		}
		ps = append(ps, p)
		u.ps = append(u.ps, p)
	}
	_, err := ps.each(ctx, func(i int, p *proc) (reply, error) {
		return p.call(ctx, command{Op: opOpen, Impl: u.impl, DSN: u.d.o.DSN, Root: u.root, Sessions: sessions[i],
			Clients: min(u.d.o.Clients, sessions[i]), TTLMillis: u.d.o.TTL.Milliseconds()})
	})
	return ps, err
}

// bases returns each worker's first global session index.
func bases(sessions []int) []int {
	b := make([]int, len(sessions))
	for i := 1; i < len(sessions); i++ {
		b[i] = b[i-1] + sessions[i-1]
	}
	return b
}

// leader returns the member that the answering members say leads (the
// one most of them name), asking them all at once: a dead member must
// not hold up the question.
func (d *driver) leader(ctx context.Context) (member, error) { return d.leaderAmong(ctx, 0) }

// leaderAmong is leader asking every member but skip.
func (d *driver) leaderAmong(ctx context.Context, skip uint64) (member, error) {
	leads := make([]uint64, len(d.members))
	var wg sync.WaitGroup
	for i, m := range d.members {
		if m.id == skip {
			continue
		}
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if st, err := d.cli.Status(sctx, m.url); err == nil {
				leads[i] = st.Leader
			}
		})
	}
	wg.Wait()
	votes := 0
	var best member
	for _, l := range d.members {
		n := 0
		for _, id := range leads {
			if id == l.id {
				n++
			}
		}
		if n > votes {
			votes, best = n, l
		}
	}
	if votes == 0 {
		return member{}, errors.New("no leader")
	}
	return best, nil
}

// snapshot scrapes every member's metrics.
type snapshot struct {
	leader member
	at     time.Time
	stats  []memberStats // by d.members' index; zero for a member that did not answer
	ok     []bool
}

func (d *driver) snapshot(ctx context.Context) (snapshot, error) {
	l, err := d.leader(ctx)
	if err != nil {
		return snapshot{}, err
	}
	s := snapshot{leader: l, at: time.Now(), stats: make([]memberStats, len(d.members)), ok: make([]bool, len(d.members))}
	var errs []error
	for i, m := range d.members {
		st, err := scrape(ctx, d.hc, m.url)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.stats[i], s.ok[i] = st, true
	}
	if !s.ok[d.index(l)] {
		return s, fmt.Errorf("leader: %w", errors.Join(errs...))
	}
	return s, nil
}

func (d *driver) index(m member) int {
	return slices.IndexFunc(d.members, func(x member) bool { return x.id == m.id })
}

// delta is the leader's change from a to b (the leader at a) and the sum
// of every member's.
func (d *driver) delta(a, b snapshot) (lead, all memberStats, secs float64) {
	i := d.index(a.leader)
	sub := func(x, y memberStats) memberStats {
		return memberStats{CPU: y.CPU - x.CPU, RSS: y.RSS - x.RSS, DBSize: y.DBSize - x.DBSize, DBInUse: y.DBInUse - x.DBInUse,
			Unary: y.Unary - x.Unary, StreamMsgs: y.StreamMsgs - x.StreamMsgs, RxBytes: y.RxBytes - x.RxBytes}
	}
	lead = sub(a.stats[i], b.stats[i])
	for j := range d.members {
		if a.ok[j] && b.ok[j] {
			dj := sub(a.stats[j], b.stats[j])
			all.CPU += dj.CPU
			all.Unary += dj.Unary
			all.StreamMsgs += dj.StreamMsgs
			all.RxBytes += dj.RxBytes
		}
	}
	return lead, all, b.at.Sub(a.at).Seconds()
}

// idle measures the cluster over the window while the workers idle.
func (d *driver) idle(ctx context.Context) (map[string]float64, snapshot, error) {
	a, err := d.snapshot(ctx)
	if err != nil {
		return nil, a, err
	}
	select {
	case <-ctx.Done():
		return nil, a, ctx.Err()
	case <-time.After(d.o.Window): // the measuring window
	}
	b, err := d.snapshot(ctx)
	if err != nil {
		return nil, a, err
	}
	if a.leader.id != b.leader.id {
		return nil, a, errors.New("the leader changed during the window")
	}
	lead, all, secs := d.delta(a, b)
	return map[string]float64{
		"leader_cpu_s_per_min":  lead.CPU / secs * 60,
		"leader_req_per_s":      lead.Requests() / secs,
		"leader_rx_bytes_per_s": lead.RxBytes / secs,
		"all_cpu_s_per_min":     all.CPU / secs * 60,
		"all_req_per_s":         all.Requests() / secs,
		"all_rx_bytes_per_s":    all.RxBytes / secs,
	}, a, nil
}

// countKeys counts the keys under prefix.
func (d *driver) countKeys(ctx context.Context, prefix string) (int64, error) {
	r, err := d.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return r.Count, nil
}

// await polls cond until it holds, within timeout: the waiters' keys, the
// cluster's leader have no notification to wait on.
func await(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), last)
		case <-t.C:
		}
	}
}

// enqueued waits until n waiters of the unit wait: counted by their keys
// (dlock, concurrency: keys keyed under the unit's name, holders
// included in n) or, for the limit, which has none, by its waiters' word.
func (u *unit) enqueued(ctx context.Context, n int, waiters procs) error {
	return await(ctx, 5*time.Minute, fmt.Sprintf("%d waiters", n), func(ctx context.Context) (bool, error) {
		if u.impl == ImplLimit {
			rs, err := waiters.each(ctx, func(_ int, p *proc) (reply, error) { return p.call(ctx, command{Op: opQueued}) })
			if err != nil {
				return false, err
			}
			got := 0
			for _, r := range rs {
				got += r.Count
			}
			return got >= n, nil
		}
		c, err := u.d.countKeys(ctx, u.root+"/"+u.name)
		return c >= int64(n), err
	})
}

// failover kills (or moves) the leader l.
func (d *driver) failover(ctx context.Context, l member) (string, error) {
	switch {
	case d.o.Failover != nil:
		return "leader killed", d.o.Failover(ctx, Leader{Endpoint: l.url, ID: l.id})
	case d.o.FailoverCmd != "":
		cmd := exec.CommandContext(ctx, "sh", "-c", d.o.FailoverCmd)
		cmd.Env = append(os.Environ(), "DLOCK_LEADER_ENDPOINT="+l.url, "DLOCK_LEADER_ID="+strconv.FormatUint(l.id, 16))
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("failover command: %w: %s", err, out)
		}
		return "leader killed by --failover-cmd", nil
	}
	var to member
	for _, m := range d.members {
		if m.id != l.id {
			to = m
			break
		}
	}
	if to.id == 0 {
		return "", errors.New("move leader: a single member")
	}
	lc, err := clientv3.New(clientv3.Config{Endpoints: []string{l.url}, TLS: d.cfg.TLS, Username: d.cfg.Username, Password: d.cfg.Password, DialTimeout: 5 * time.Second, Logger: d.cli.GetLogger()})
	if err != nil {
		return "", fmt.Errorf("move leader: %w", err)
	}
	defer lc.Close()
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := lc.MoveLeader(mctx, to.id); err != nil {
		return "", fmt.Errorf("move leader: %w", err)
	}
	return "graceful MoveLeader, not a crash (give --failover-cmd to kill the leader)", nil
}

// healthy waits until every member answers and one leads.
func (d *driver) healthy(ctx context.Context) error {
	return await(ctx, 2*time.Minute, "every member answering", func(ctx context.Context) (bool, error) {
		for _, m := range d.members {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := d.cli.Status(sctx, m.url)
			cancel()
			if err != nil {
				return false, err
			}
			if st.Leader == 0 {
				return false, nil
			}
		}
		return true, nil
	})
}
