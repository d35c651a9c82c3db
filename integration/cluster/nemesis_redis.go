package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// The Redis fault classes. Each aims at what the Redis backends' docs
// name as their limit; the table measures what it does to them.
var RedisClasses = []string{
	// failover: the Sentinel master's replication link is cut, a redis
	// worker is granted on the master (so its grant, and the INCR of its
	// token, never reach the replica), the master is SIGKILLed and the
	// sentinels promote the replica. Heal: the old master restarts empty;
	// the sentinels make it a replica of the new one. With RedisReplicas
	// no grant can be confirmed after the cut: the master is killed 2 TTLs
	// later, and the heal lasts until the old master is a linked replica.
	"failover",
	// restart-empty: a Redlock node is cut off from the workers while a
	// redlock worker holds, until the holder's key there lapses (it holds
	// on the other two, a bare majority); one of those two is SIGKILLed
	// and restarted at once with no data, and the cut is healed: the next
	// acquire finds a majority free while the holder's grant is valid.
	"restart-empty",
	// clock-fast-node: two of the three Redlock nodes (a majority) are
	// restarted on a clock that runs redisClockFactor times fast, each
	// kept down for a TTL first (the delayed restart Redlock's authors
	// advise, so that the restart itself grants nothing twice). Heal: the
	// same, back to the real clock.
	"clock-fast-node",
	// partition-redis: the Sentinel master, or a Redlock node, cut off
	// from the workers (alternately).
	"partition-redis",
	// pause-use: SIGSTOP a holder (a redis and a redlock one alternately)
	// inside its critical section (phase "inside": it looks at Done again
	// only after its write) for longer than the TTL, then SIGCONT: the
	// process pause of Kleppmann's figure.
	"pause-use",
}

// redisClockFactor is the fast clock's rate for clock-fast-node. A grant
// extends itself every TTL/3 (dlock.Open's Redis lockers auto-extend), so
// a key lives TTL/f real time on a node whose clock runs f times fast: it
// lapses between extensions only when f > 3.
const redisClockFactor = 4

// redisNemesis injects the Redis faults into a RedisHarness, drawing from
// the etcd nemesis' PRNG the same way (one pick and one duration per
// fault), so that a seed replays the same schedule.
type redisNemesis struct {
	*nemesis
	rh    *RedisHarness
	turns map[string]int // faults of each class so far: alternates targets
}

// inject runs fault f: it begins it, waits its length and heals it.
func (n *redisNemesis) inject(ctx context.Context, f *Fault) {
	pick := n.rng.IntN(1 << 20)
	var d time.Duration
	switch f.Class {
	case "pause-use":
		d = n.h.Cfg.TTL + time.Second + n.duration(0, 1)
	case "failover", "restart-empty":
		d = n.duration(1, 2)
	case "clock-fast-node":
		d = n.duration(2, 4)
	default:
		d = n.duration(1, 3)
	}
	turn := n.turns[f.Class]
	n.turns[f.Class]++
	n.hold(ctx, f, d, func() (func() error, error) { return n.begin(ctx, f, pick, turn) })
}

// begin starts the fault and returns how to heal it. turn counts the
// earlier faults of the class.
func (n *redisNemesis) begin(ctx context.Context, f *Fault, pick, turn int) (func() error, error) {
	rh := n.rh
	nt := rh.Net
	ttl := rh.Cfg.TTL
	switch f.Class {
	case "failover":
		return n.failover(ctx, f)
	case "restart-empty":
		return n.restartEmpty(ctx, f, pick)
	case "clock-fast-node":
		var nodes []*RedisNode
		for i := range 2 {
			nodes = append(nodes, rh.Redlock[(pick+i)%3])
		}
		for _, node := range nodes {
			f.Targets = append(f.Targets, node.Name)
		}
		f.Note = fmt.Sprintf("at %v× (down %v before each restart)", float64(redisClockFactor), ttl)
		restart := func(factor float64) error {
			for _, node := range nodes {
				node.kill()
				sleep(ctx, ttl)
				if err := node.start(ctx, nil, rh.shim, factor); err != nil {
					return err
				}
			}
			return nil
		}
		return func() error { return restart(0) }, restart(redisClockFactor)
	case "partition-redis":
		target := rh.Redlock[pick%3]
		if turn%2 == 0 {
			m, err := rh.Master(ctx)
			if err != nil {
				return nil, err
			}
			target = m
		}
		f.Targets = []string{target.Name}
		f.Note = "cut off from the workers"
		return nt.Heal, nt.Drop(target.Host, rh.Clients)
	case "pause-use":
		wl := RedisWorkloads[turn%len(RedisWorkloads)]
		w := n.awaitPhase(ctx, wl, "inside", nil, pick, 2*ttl)
		if w == nil {
			return nil, fmt.Errorf("no %s worker in its critical section within %v", wl, 2*ttl)
		}
		f.Targets = []string{fmt.Sprintf("w%d", w.ID)}
		f.Workers = []int{w.ID}
		f.Note = w.Workload
		if err := w.Proc.Signal(syscall.SIGSTOP); err != nil {
			return nil, err
		}
		return func() error { return w.Proc.Signal(syscall.SIGCONT) }, nil
	}
	return nil, fmt.Errorf("unknown Redis fault class %q", f.Class)
}

// failover begins the failover fault (see RedisClasses): it waits until
// the group can fail over, cuts master and replica apart, waits for a
// grant on the master after the cut (with replicas= set none can come:
// it waits 2 TTLs of refused attempts instead), kills the master and
// waits until the sentinels name the replica.
func (n *redisNemesis) failover(ctx context.Context, f *Fault) (func() error, error) {
	rh := n.rh
	nt := rh.Net
	ttl := rh.Cfg.TTL
	if err := rh.awaitSettled(ctx); err != nil {
		return nil, err
	}
	m, err := rh.Master(ctx)
	if err != nil {
		return nil, err
	}
	r := rh.replicaOf(m)
	f.Targets = []string{m.Name, r.Name}
	if err := nt.Drop(m.Host, r.Host); err != nil {
		return nt.Heal, err
	}
	granted := "no grant confirmed after the cut (replicas): killed 2 TTLs later"
	if rh.Cfg.RedisReplicas > 0 {
		// No grant can be confirmed while the link is cut: the workers'
		// attempts write on the master, unconfirmed, and release. The
		// fault lasts 2 TTLs of those, as long as a holder's grant.
		sleep(ctx, 2*ttl)
	} else {
		since := grantsNow(rh.Workers())
		w := n.awaitPhase(ctx, "redis", "use", since, 0, 4*ttl)
		if w == nil {
			return nt.Heal, fmt.Errorf("no redis worker granted within %v after the replication link was cut", 4*ttl)
		}
		f.Workers = []int{w.ID}
		granted = fmt.Sprintf("w%d granted on %s after the cut", w.ID, m.Name)
	}
	m.kill()
	killed := time.Now()
	heal := func() error {
		err := errors.Join(nt.Heal(), m.start(ctx, nil, rh.shim, 0))
		if err == nil && rh.Cfg.RedisReplicas > 0 {
			// Grants need a linked replica again: the fault lasts until
			// the old master has rejoined as the new one's replica.
			err = rh.awaitSettled(ctx)
		}
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if nm, err := rh.Master(pctx); err == nil && nm == r {
			break
		}
		select {
		case <-pctx.Done():
			return heal, fmt.Errorf("the sentinels did not promote %s within 30s", r.Name)
		case <-time.After(50 * time.Millisecond):
		}
	}
	f.Note = fmt.Sprintf("%s; %s promoted %v after the kill", granted, r.Name, time.Since(killed).Round(time.Millisecond))
	return heal, nil
}

// restartEmpty begins the restart-empty fault (see RedisClasses). To put
// a holder on a bare majority it does not wait for a grant made while a
// node is cut off (contenders that can reach only two nodes split them
// between themselves and may grant nobody for many seconds): it cuts a
// node off from a fresh holder instead, and lets the holder's key there
// lapse while the holder extends its grant on the other two. If the
// holder releases first, the cut is healed and the next fresh holder is
// tried, for up to 24 TTLs. A try succeeds about half the time (holds are
// uniform up to 2 TTLs, and the holder must keep its grant a TTL after the
// cut): 12 TTLs, about 7 tries, failed a CI run (2026-12-06); 24 make it
// about 14.
func (n *redisNemesis) restartEmpty(ctx context.Context, f *Fault, pick int) (func() error, error) {
	rh := n.rh
	nt := rh.Net
	ttl := rh.Cfg.TTL
	cut, victim := rh.Redlock[pick%3], rh.Redlock[(pick+1)%3]
	f.Targets = []string{cut.Name, victim.Name}
	const budget = 24 // TTLs
	deadline := time.Now().Add(budget * ttl)
	for try := 1; ; try++ {
		w := n.awaitPhase(ctx, "redlock", "use", grantsNow(rh.Workers()), pick+try, time.Until(deadline))
		if w == nil {
			return nil, fmt.Errorf("no redlock holder kept its grant for a TTL after %s was cut off (%d tries in %v)", cut.Name, try-1, budget*ttl)
		}
		_, g := w.Phase()
		if err := nt.Drop(cut.Host, rh.Clients); err != nil {
			return nt.Heal, err
		}
		// The key on cut was set or extended before the cut: it is gone a
		// TTL later, on cut's clock.
		if stillHolds(ctx, w, g, ttl+200*time.Millisecond) {
			f.Workers = []int{w.ID}
			victim.kill()
			err := victim.start(ctx, nil, rh.shim, 0)
			f.Note = fmt.Sprintf("w%d held on %s and %s only (its key on %s lapsed while cut off); %s restarted empty, %s reconnected (try %d)",
				w.ID, victim.Name, rh.Redlock[(pick+2)%3].Name, cut.Name, victim.Name, cut.Name, try)
			return nil, errors.Join(err, nt.Heal())
		}
		if err := nt.Heal(); err != nil {
			return nil, err
		}
	}
}

// stillHolds waits d and reports whether w held its grant g throughout.
func stillHolds(ctx context.Context, w *Worker, g int, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		ch := w.changed()
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
func grantsNow(ws []*Worker) map[int]int {
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

// awaitPhase returns a live worker of workload wl in phase (a holder:
// "use" means "use" or "inside"), with a grant numbered above since[its
// ID], within wait, starting the search at its pick-th worker; nil if
// none does. A nil since accepts any grant.
func (n *redisNemesis) awaitPhase(ctx context.Context, wl, phase string, since map[int]int, pick int, wait time.Duration) *Worker {
	ws := slices.DeleteFunc(n.h.Workers(), func(w *Worker) bool { return w.Workload != wl })
	return awaitWorker(ctx, ws, pick, wait, func(w *Worker, p string, g int) bool {
		return (p == phase || phase == "use" && holding(p)) && g > since[w.ID]
	})
}

// holding tells whether a worker in phase holds its grant: it uses it
// ("use"), or is inside its critical section ("inside").
func holding(phase string) bool { return phase == "use" || phase == "inside" }

// FastClockEnv is the environment variable from which the fast-clock shim
// reads its factor.
const FastClockEnv = "DLOCK_FAST_CLOCK"

// fastClockSrc is an LD_PRELOAD shim that runs a process's clocks (all
// but the CPU-time ones) at DLOCK_FAST_CLOCK times the real rate from the
// process's first reading of each: clock_gettime, gettimeofday and time.
// It reads the real clock with the raw system call (no dlsym, no
// allocation), so it works from the first call, even from a malloc's
// initialisation (which is where libfaketime hangs redis-server 7.0).
const fastClockSrc = `#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static double factor;      /* 0 until read */
static long long base[8];  /* per clock: its first real reading (ns) */

static long long scale(clockid_t id, long long now) {
	if (factor == 0) {
		const char *e = getenv("` + FastClockEnv + `");
		double f = e ? strtod(e, NULL) : 1;
		factor = f > 0 ? f : 1;
	}
	long long zero = 0;
	__atomic_compare_exchange_n(&base[id], &zero, now, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	long long b = __atomic_load_n(&base[id], __ATOMIC_SEQ_CST);
	return b + (long long)((double)(now - b) * factor);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	if (syscall(SYS_clock_gettime, id, ts) != 0)
		return -1;
	if (id < 0 || id >= 8 || id == CLOCK_PROCESS_CPUTIME_ID || id == CLOCK_THREAD_CPUTIME_ID)
		return 0;
	long long t = scale(id, ts->tv_sec * 1000000000LL + ts->tv_nsec);
	ts->tv_sec = t / 1000000000LL;
	ts->tv_nsec = t % 1000000000LL;
	return 0;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return -1;
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return -1;
	if (t)
		*t = ts.tv_sec;
	return ts.tv_sec;
}
`

// BuildFastClock compiles the fast-clock shim with gcc into dir and
// returns the path of the shared object. A process started with
// fastClockEnv(path, f) runs its clocks f times fast.
func BuildFastClock(dir string) (string, error) {
	if _, err := exec.LookPath("gcc"); err != nil {
		return "", errors.New("cluster: gcc not found (the fast-clock shim is built with it)")
	}
	src := filepath.Join(dir, "fastclock.c")
	so := filepath.Join(dir, "fastclock.so")
	if err := os.WriteFile(src, []byte(fastClockSrc), 0o644); err != nil {
		return "", err
	}
	out, err := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", so, src).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("cluster: build the fast-clock shim: %v\n%s", err, out)
	}
	return so, nil
}

// fastClockEnv is the environment that runs a process under the shim so
// at factor.
func fastClockEnv(so string, factor float64) []string {
	return []string{"LD_PRELOAD=" + so, FastClockEnv + "=" + strconv.FormatFloat(factor, 'f', -1, 64)}
}
