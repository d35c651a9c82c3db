//go:build dlock_faults

package fault

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Enabled reports whether this build has the seam (the tag dlock_faults).
const Enabled = true

// config is what the environment asked for, read once (and again by
// Reload).
type config struct {
	rate   float64   // the clock's rate; 1: real time
	start  time.Time // a real time, with its monotonic reading: the clock reads start + rate × (now − start)
	plants map[string]bool
}

var (
	cur  atomic.Pointer[config]
	hook atomic.Pointer[func(lease int64, deadline time.Time, err error)]
)

func init() {
	c, err := load()
	if err != nil {
		panic(err)
	}
	cur.Store(c)
}

// Reload reads RateEnv and PlantEnv again, for tests that set them (with
// t.Setenv) and restore them after. The seam clock starts again, from the
// real time now: call Reload only while no session or grant lives. On
// error nothing changes.
func Reload() error {
	c, err := load()
	if err != nil {
		return err
	}
	cur.Store(c)
	return nil
}

func load() (*config, error) {
	c := &config{rate: 1, start: time.Now(), plants: make(map[string]bool)}
	if v := strings.TrimSpace(os.Getenv(RateEnv)); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 || math.IsInf(r, 0) || math.IsNaN(r) {
			return nil, fmt.Errorf("fault: %s=%q: want a positive number", RateEnv, v)
		}
		c.rate = r
	}
	var errs []error
	for p := range strings.SplitSeq(os.Getenv(PlantEnv), ",") {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
		case slices.Contains(Plants, p):
			c.plants[p] = true
		default:
			errs = append(errs, fmt.Errorf("fault: %s: unknown plant %q (want one of %s)", PlantEnv, p, strings.Join(Plants, ", ")))
		}
	}
	return c, errors.Join(errs...)
}

// Now returns the seam clock's current time: start + rate × (real time
// elapsed since start), carrying a monotonic reading.
func Now() time.Time {
	c := cur.Load()
	now := time.Now()
	if c.rate == 1 {
		return now
	}
	return c.start.Add(time.Duration(c.rate * float64(now.Sub(c.start))))
}

// Until returns the real duration until the seam clock reads t:
// (t − Now()) / rate.
func Until(t time.Time) time.Duration { return time.Until(Real(t)) }

// Since returns the seam clock's time elapsed since t, a time of the seam
// clock.
func Since(t time.Time) time.Duration { return Now().Sub(t) }

// Real returns the real time at which the seam clock reads t, with a
// monotonic reading if t has one.
func Real(t time.Time) time.Time {
	c := cur.Load()
	if c.rate == 1 {
		return t
	}
	return c.start.Add(time.Duration(float64(t.Sub(c.start)) / c.rate))
}

// Wall returns Real(t) as a wall-clock time, without monotonic reading
// (Round(0)): comparable with another process's time.Now().
func Wall(t time.Time) time.Time { return Real(t).Round(0) }

// Planted reports whether PlantEnv names the plant name.
func Planted(name string) bool { return cur.Load().plants[name] }

// Validity returns v, a session's local validity after a keepalive
// granted ttl (the server's expiry, less the session's margin), or under
// the plant LateDone ttl + ttl/2: past the server's expiry.
func Validity(ttl, v time.Duration) time.Duration {
	if Planted(LateDone) {
		return ttl + ttl/2
	}
	return v
}

// OnSessionEnd registers fn as the process-wide session-end hook,
// replacing the one before (nil removes it). Every session calls fn once,
// when it ends, in the goroutine that ends it (its heartbeat loop, or
// Close's caller), synchronously, before any grant on the session ends
// and before its Done closes: fn must be quick. Its arguments are the
// session's lease ID, its local deadline as a real wall-clock time
// (Wall), and why it ended (the session's Err: session.ErrExpired,
// session.ErrLeaseGone, session.ErrClosed).
func OnSessionEnd(fn func(lease int64, deadline time.Time, err error)) {
	if fn == nil {
		hook.Store(nil)
		return
	}
	hook.Store(&fn)
}

// SessionEnded calls the session-end hook, if one is registered, with
// deadline (a time of the seam clock) converted by Wall. Package session
// calls it.
func SessionEnded(lease int64, deadline time.Time, err error) {
	if fn := hook.Load(); fn != nil {
		(*fn)(lease, Wall(deadline), err)
	}
}
