package capacity

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// throughput (a): load slots, each looping Lock→Unlock on a name of its
// own, spread over the workers and over up to 8 sessions per worker.
func (u *unit) throughput(ctx context.Context, load int) ([]result, error) {
	slots := split(load, u.d.o.Procs)
	sessions := make([]int, len(slots))
	for i, s := range slots {
		sessions[i] = min(s, 8)
	}
	ps, err := u.spawn(ctx, sessions)
	if err != nil {
		return nil, err
	}
	a, err := u.d.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	b0 := bases(slots)
	start := time.Now()
	rs, err := ps.each(ctx, func(i int, p *proc) (reply, error) {
		return p.call(ctx, command{Op: opLoop, Prefix: u.name, Base: b0[i], Slots: slots[i], DurMillis: u.d.o.Duration.Milliseconds()})
	})
	elapsed := time.Since(start).Seconds()
	if err != nil {
		return nil, err
	}
	b, err := u.d.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	var lat []float64
	grants := 0
	for _, r := range rs {
		grants += r.Count
		lat = append(lat, r.Lat...)
	}
	m := map[string]float64{
		"grants_per_s":   float64(grants) / elapsed,
		"acquire_p50_ms": percentile(lat, 50),
		"acquire_p99_ms": percentile(lat, 99),
	}
	if a.leader.id == b.leader.id {
		lead, _, secs := u.d.delta(a, b)
		m["leader_cpu_s_per_min"] = lead.CPU / secs * 60
		m["leader_req_per_s"] = lead.Requests() / secs
	}
	return []result{{m: m}}, nil
}

// held (b): load locks held (watched) across HeldSessions sessions, then
// an idle window, then Lock+Unlock of extra locks.
func (u *unit) held(ctx context.Context, load int) ([]result, error) {
	nsess := min(u.d.o.HeldSessions, load)
	per := load / nsess
	sessions := split(nsess, u.d.o.Procs)
	ps, err := u.spawn(ctx, sessions)
	if err != nil {
		return nil, err
	}
	s0, err := u.d.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	if err := u.hold(ctx, ps, sessions, per); err != nil {
		return nil, err
	}
	m, s1, err := u.d.idle(ctx)
	if err != nil {
		return nil, err
	}
	n := float64(per * nsess)
	if s0.leader.id == s1.leader.id {
		lead, _, _ := u.d.delta(s0, s1)
		m["rss_bytes_per_lock"] = lead.RSS / n
		m["db_bytes_per_lock"] = lead.DBInUse / n
	}
	r, err := ps[0].call(ctx, command{Op: opLockUnlock, Prefix: u.name + "x", K: u.d.o.Extra})
	if err != nil {
		return nil, err
	}
	m["lock_unlock_p50_ms"] = percentile(r.Lat, 50)
	m["lock_unlock_p99_ms"] = percentile(r.Lat, 99)
	note := ""
	if int(n) != load {
		note = fmt.Sprintf("%d held (%d per session)", int(n), per)
	}
	return []result{{m: m, note: note}}, nil
}

// waiters (c): load waiters on one held name, each on a session of its
// own; the holder releases, and each waiter in turn is granted and
// releases at once.
func (u *unit) waiters(ctx context.Context, load int) ([]result, error) {
	if u.impl == ImplLimit && load > u.d.o.HerdMax {
		return []result{{m: map[string]float64{}, note: fmt.Sprintf("skipped: the limit has no queue; its herd retries O(W²) above %d waiters", u.d.o.HerdMax)}}, nil
	}
	waiters := split(load, u.d.o.Procs)
	sessions := slices.Clone(waiters)
	sessions[0]++ // the holder's
	ps, err := u.spawn(ctx, sessions)
	if err != nil {
		return nil, err
	}
	if _, err := ps[0].call(ctx, command{Op: opHoldOne, Name: u.name}); err != nil {
		return nil, err
	}
	s0, err := u.d.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	var rs []reply
	var werr error
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() {
		rs, werr = ps.each(wctx, func(i int, p *proc) (reply, error) {
			skip := 0
			if i == 0 {
				skip = 1
			}
			return p.call(wctx, command{Op: opWait, Name: u.name, K: waiters[i], Skip: skip})
		})
	})
	want := load + 1 // the holder's key and the waiters'
	if u.impl == ImplLimit {
		want = load
	}
	if err := u.enqueued(ctx, want, ps); err != nil {
		cancel()
		wg.Wait()
		return nil, err
	}
	s1, err := u.d.snapshot(ctx)
	if err != nil {
		cancel()
		wg.Wait()
		return nil, err
	}
	rel, err := ps[0].call(ctx, command{Op: opRelease})
	if err != nil {
		cancel()
		wg.Wait()
		return nil, err
	}
	wg.Wait()
	if werr != nil {
		return nil, werr
	}
	var evs []event
	for _, r := range rs {
		evs = append(evs, r.Events...)
	}
	slices.SortFunc(evs, func(a, b event) int { return cmp.Compare(a.Grant, b.Grant) })
	prev := rel.LastNS
	var hand []float64
	revs := make([]int64, len(evs))
	for i, e := range evs {
		hand = append(hand, float64(e.Grant-prev)/1e6)
		prev = e.Unlock
		revs[i] = e.Rev
	}
	m := map[string]float64{
		"handoff_p50_ms": percentile(hand, 50),
		"handoff_p99_ms": percentile(hand, 99),
	}
	if s0.leader.id == s1.leader.id {
		lead, _, _ := u.d.delta(s0, s1)
		m["leader_mem_bytes_per_waiter"] = lead.RSS / float64(load)
	}
	note := ""
	if u.impl == ImplLimit {
		note = "no queue: waiters retry on the key's delete (a herd); FIFO order n/a"
	} else {
		m["out_of_order"] = float64(outOfOrder(revs))
	}
	return []result{{m: m, note: note}}, nil
}

// hold has each session of the processes ps (sessions[i] in ps[i]) hold
// k watched locks, named from bases(sessions) on.
func (u *unit) hold(ctx context.Context, ps procs, sessions []int, k int) error {
	b := bases(sessions)
	_, err := ps.each(ctx, func(i int, p *proc) (reply, error) {
		return p.call(ctx, command{Op: opHold, Prefix: u.name, Base: b[i], K: k, Watch: true})
	})
	return err
}

// sessions (d): load idle sessions, then each with 10 watched held locks;
// the leader's cost over a window of each.
func (u *unit) sessions(ctx context.Context, load int) ([]result, error) {
	sessions := split(load, u.d.o.Procs)
	ps, err := u.spawn(ctx, sessions)
	if err != nil {
		return nil, err
	}
	note := ""
	if u.impl == ImplLimit {
		note = "a bare lease kept by clientv3 KeepAlive: what concurrency.Session does"
	}
	idle, _, err := u.d.idle(ctx)
	if err != nil {
		return nil, err
	}
	if err := u.hold(ctx, ps, sessions, 10); err != nil {
		return nil, err
	}
	held, _, err := u.d.idle(ctx)
	if err != nil {
		return nil, err
	}
	return []result{{variant: "idle", m: idle, note: note}, {variant: "watched10", m: held, note: note}}, nil
}

// expiry (e): load sessions in half the workers each hold a lock, with a
// waiter each in the other half; the holders' workers are SIGKILLed at
// once.
func (u *unit) expiry(ctx context.Context, load int) ([]result, error) {
	hp := max(1, u.d.o.Procs/2)
	wp := max(1, u.d.o.Procs-hp)
	hs, ws := split(load, hp), split(load, wp)
	holders, err := u.spawn(ctx, hs)
	if err != nil {
		return nil, err
	}
	if err := u.hold(ctx, holders, hs, 1); err != nil {
		return nil, err
	}
	waiters, err := u.spawn(ctx, ws)
	if err != nil {
		return nil, err
	}
	wb := bases(ws)
	var wg sync.WaitGroup
	var rs []reply
	var werr error
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() {
		rs, werr = waiters.each(wctx, func(i int, p *proc) (reply, error) {
			return p.call(wctx, command{Op: opWaitMany, Prefix: u.name, Base: wb[i]})
		})
	})
	want := 2 * load
	if u.impl == ImplLimit {
		want = load
	}
	if err := u.enqueued(ctx, want, waiters); err != nil {
		cancel()
		wg.Wait()
		return nil, err
	}
	t0 := time.Now()
	var kw sync.WaitGroup
	for _, p := range holders {
		kw.Go(p.kill)
	}
	kw.Wait()
	wg.Wait()
	if werr != nil {
		return nil, werr
	}
	first, last := int64(math.MaxInt64), int64(0)
	for _, r := range rs {
		for _, e := range r.Events {
			first, last = min(first, e.Grant), max(last, e.Grant)
		}
	}
	t := float64(t0.UnixNano())
	return []result{{m: map[string]float64{
		"first_grant_s":  (float64(first) - t) / 1e9,
		"all_granted_s":  (float64(last) - t) / 1e9,
		"ttl_s":          u.d.o.TTL.Seconds(),
		"revoke_bound_s": float64(load) / 1000,
	}}}, nil
}

// failover (f): load live sessions; the leader fails (or moves); time to
// the first grant, to every session's renewal, and sessions lost.
func (u *unit) failover(ctx context.Context, load int) ([]result, error) {
	if err := u.d.healthy(ctx); err != nil {
		return nil, err
	}
	sessions := split(load, u.d.o.Procs)
	ps, err := u.spawn(ctx, sessions)
	if err != nil {
		return nil, err
	}
	old, err := u.d.leader(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := ps.each(ctx, func(_ int, p *proc) (reply, error) { return p.call(ctx, command{Op: opMark}) }); err != nil {
		return nil, err
	}
	t0 := time.Now()
	note, err := u.d.failover(ctx, old)
	if err != nil {
		return nil, err
	}
	if u.d.o.Recover != nil {
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			defer cancel()
			_ = u.d.o.Recover(rctx, Leader{Endpoint: old.url, ID: old.id})
		}()
	}
	var wg sync.WaitGroup
	var probe reply
	var perr error
	wg.Go(func() { probe, perr = ps[0].call(ctx, command{Op: opProbe, Name: u.name + "p"}) })
	var elected time.Time
	wg.Go(func() {
		_ = await(ctx, time.Minute, "a new leader", func(ctx context.Context) (bool, error) {
			l, err := u.d.leaderAmong(ctx, old.id)
			if err == nil && l.id != old.id {
				elected = time.Now()
				return true, nil
			}
			return false, err
		})
	})
	rs, rerr := ps.each(ctx, func(_ int, p *proc) (reply, error) {
		return p.call(ctx, command{Op: opRenewed, DurMillis: (3*u.d.o.TTL + 30*time.Second).Milliseconds()})
	})
	wg.Wait()
	if perr != nil {
		return nil, perr
	}
	if rerr != nil {
		return nil, rerr
	}
	lost, last := 0, int64(0)
	for _, r := range rs {
		lost += r.Lost
		last = max(last, r.LastNS)
	}
	t := float64(t0.UnixNano())
	m := map[string]float64{
		"time_to_first_grant_s": (float64(probe.GrantNS) - t) / 1e9,
		"all_renewed_s":         (float64(last) - t) / 1e9,
		"sessions_lost":         float64(lost),
	}
	if !elected.IsZero() {
		m["new_leader_s"] = elected.Sub(t0).Seconds()
	}
	return []result{{m: m, note: note}}, nil
}
