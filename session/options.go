package session

import (
	"fmt"
	"log/slog"

	"github.com/dlock-go/dlock/telemetry"

	"time"

	"github.com/dlock-go/dlock/internal/option"
)

// Defaults for the options. Each option's doc says how it is validated.
const (
	// DefaultTTL is the lease TTL when WithTTL is not given.
	DefaultTTL = 10 * time.Second
	// MinTTL is the shortest TTL etcd grants (it rounds the lease TTL to
	// whole seconds, with a floor of its own minimum).
	MinTTL = 2 * time.Second
)

// Option configures a Session.
type Option func(*options)

type options struct {
	ttl       time.Duration
	heartbeat time.Duration // 0: ttl/3
	margin    time.Duration // -1: default
	tel       telemetry.Providers
}

func defaults() options {
	return options{ttl: DefaultTTL, margin: -1}
}

// build applies opts to the defaults and validates the result.
func build(opts []Option) (options, error) {
	o := defaults()
	if err := option.Apply(&o, opts); err != nil {
		return o, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return o, o.validate()
}

// WithTTL sets the lease TTL. Optional, defaults to DefaultTTL (10s). It must
// be a whole number of seconds (etcd leases have second granularity) and at
// least MinTTL.
func WithTTL(ttl time.Duration) Option { return func(o *options) { o.ttl = ttl } }

// WithTelemetry sets where the session's metrics and logs go (see package
// telemetry): dlock.session.ended (by cause), its end logged at WARN when
// it expired or its lease is gone and at DEBUG on Close, and a Manager's
// sessions' starts and failed starts. Optional, defaults to the zero
// Providers: the global OpenTelemetry providers and no logs.
func WithTelemetry(p telemetry.Providers) Option { return func(o *options) { o.tel = p } }

// WithHeartbeat sets the interval between keepalives. Optional, defaults to
// TTL/3. It must be positive and shorter than TTL − margin. A keepalive is
// sent at the first tick of the process's heartbeat grid at or after the
// interval, a little later: see options.beat.
func WithHeartbeat(d time.Duration) Option { return func(o *options) { o.heartbeat = d } }

// WithSafetyMargin sets how long before the server could expire the lease
// the session's local deadline fires. Optional, defaults to TTL/5, at least
// 500ms and at most 2s. It must be ≥ 0 and < TTL − heartbeat, so that a
// healthy session renews before its deadline.
func WithSafetyMargin(d time.Duration) Option { return func(o *options) { o.margin = d } }

// defaultMargin returns the default safety margin for ttl: ttl/5, but at
// least 500ms and at most 2s. The margin has to cover what separates the
// server's expiry clock from ours: the one-way delay of the acknowledged
// keepalive (counted from its send time, so already covered), clock rate
// differences between the two monotonic clocks (well under 0.1% on any sane
// host: 10ms on 10s), and the lag of etcd's lessor, which may expire a lease
// up to ~500ms late but never early. 2s also absorbs a stop-the-world pause
// of the holder of that length between checking Done and acting.
func defaultMargin(ttl time.Duration) time.Duration {
	m := ttl / 5
	if m < 500*time.Millisecond {
		m = 500 * time.Millisecond
	}
	if m > 2*time.Second {
		m = 2 * time.Second
	}
	return m
}

func (o *options) validate() error {
	if o.ttl <= 0 {
		return fmt.Errorf("%w: ttl %v must be positive", ErrInvalidOption, o.ttl)
	}
	if o.ttl < MinTTL {
		return fmt.Errorf("%w: ttl %v is below the minimum %v", ErrInvalidOption, o.ttl, MinTTL)
	}
	if o.ttl%time.Second != 0 {
		return fmt.Errorf("%w: ttl %v is not a whole number of seconds (etcd lease granularity)", ErrInvalidOption, o.ttl)
	}
	if o.margin < 0 && o.margin != -1 {
		return fmt.Errorf("%w: safety margin %v must not be negative", ErrInvalidOption, o.margin)
	}
	if o.margin == -1 {
		o.margin = defaultMargin(o.ttl)
	}
	if o.heartbeat < 0 {
		return fmt.Errorf("%w: heartbeat %v must be positive", ErrInvalidOption, o.heartbeat)
	}
	if o.heartbeat == 0 {
		o.heartbeat = o.ttl / 3
	}
	if o.heartbeat >= o.ttl {
		return fmt.Errorf("%w: heartbeat %v must be shorter than ttl %v", ErrInvalidOption, o.heartbeat, o.ttl)
	}
	if o.margin >= o.ttl-o.heartbeat {
		return fmt.Errorf("%w: safety margin %v must be shorter than ttl − heartbeat (%v − %v)", ErrInvalidOption, o.margin, o.ttl, o.heartbeat)
	}
	return nil
}

// The heartbeat grid. A process's sessions send their keepalives at the
// ticks of one grid (one per tick size), so that keepalives due close
// together leave together and etcd reads them in a batch: the same
// coalescing as etcd's own client, whose keepalive loop sends every lease
// due on a 500ms tick. Measured (BENCHMARKS.md, "Capacity"), the grid
// alone takes a few hundred idle sessions' cost to etcd from 1.8× to about
// 1.0× that of etcd's concurrency.Session.
//
// The tick is at most 500ms, a quarter of the heartbeat interval and a
// quarter of the slack between a heartbeat and the local deadline (TTL −
// margin − heartbeat), so a keepalive leaves less than a tick later than
// the heartbeat interval says, and a healthy session still renews well
// before its deadline. Keepalives are then up to heartbeat + tick apart
// (3.5 s at the default TTL of 10 s), and an outage shorter than TTL −
// margin − heartbeat − tick ends no session (4.2 s at the defaults).
var gridStart = time.Now()

const maxTick = 500 * time.Millisecond

// tick is the grid's: at most maxTick, a quarter of the heartbeat and a
// quarter of the slack between a heartbeat and the local deadline.
func (o *options) tick() time.Duration {
	return min(maxTick, o.heartbeat/4, (o.ttl-o.margin-o.heartbeat)/4)
}

// beat returns when the keepalive due at t leaves: the first tick of the
// grid at or after t.
func (o *options) beat(t time.Time) time.Time {
	tick := o.tick()
	if tick <= 0 {
		return t
	}
	if r := t.Sub(gridStart) % tick; r > 0 {
		return t.Add(tick - r)
	}
	return t
}

// logger is where the session and the Manager log: the Providers' Logger,
// or nowhere.
func (o *options) logger() *slog.Logger {
	if o.tel.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.tel.Logger
}
