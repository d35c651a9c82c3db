// Package obs is dlock's one place for metrics, traces and logs:
// the OpenTelemetry instruments named in DESIGN.md ("Metrics"), from the
// meter "github.com/dlock-go/dlock", spans per acquire and per guarded
// write, and the slog logger. Every backend records through a *T, made
// once per owner; the package keeps no state of its own.
package obs

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the name of dlock's meter and tracer.
const Scope = "github.com/dlock-go/dlock"

// Attribute keys and values.
const (
	Backend = attribute.Key("dlock.backend")
	Outcome = attribute.Key("dlock.outcome")
	Cause   = attribute.Key("dlock.cause")
	Guard   = attribute.Key("dlock.guard")

	Lock   = attribute.Key("dlock.lock")   // traces only: lock names are not metric attributes
	Token  = attribute.Key("dlock.token")  // traces only
	Ahead  = attribute.Key("dlock.ahead")  // traces only: entries before this one at its enqueue (semaphores)
	Queued = attribute.Key("dlock.queued") // traces only: it had to wait behind another entry
	WaitS  = attribute.Key("dlock.wait_s") // traces only: seconds from the acquire's start to its end
	Result = attribute.Key("dlock.result")
)

// Outcomes of an acquire.
const (
	Granted  = "granted"
	Locked   = "locked" // TryLock refused
	Canceled = "canceled"
	Failed   = "error"
)

// OutcomeOf classifies a failed acquire: Locked when err matches locked
// (the backend's TryLock refusal), Canceled when err is ctx's own error,
// else Failed.
func OutcomeOf(ctx context.Context, err, locked error) string {
	switch {
	case errors.Is(err, locked):
		return Locked
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return Canceled
	}
	return Failed
}

// Causes of a loss and of a session's end.
const (
	LostSession = "session"
	LostDeleted = "deleted"
	LostExpired = "expired"

	EndExpired   = "expired"
	EndLeaseGone = "lease_gone"
	EndClosed    = "closed"
)

// instruments are the instruments of one MeterProvider.
type instruments struct {
	acquire      metric.Float64Histogram
	held         metric.Int64UpDownCounter
	lost         metric.Int64Counter
	sessionEnded metric.Int64Counter
	rejected     metric.Int64Counter
	leader       metric.Int64UpDownCounter
}

// instrumentsOf makes the instruments on mp. Each owner (a lock, a
// session, a guard) makes its own once, at construction: nothing is kept
// per MeterProvider at package level (the SDK returns the same instrument
// for the same name, so the owners still record into one).
func instrumentsOf(mp metric.MeterProvider) *instruments {
	m := mp.Meter(Scope)
	in := &instruments{}
	// The API returns a no-op instrument along with any error.
	in.acquire, _ = m.Float64Histogram("dlock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time an acquire (Lock, TryLock, Acquire, Campaign) took, by outcome."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
	in.held, _ = m.Int64UpDownCounter("dlock.held", metric.WithUnit("{grant}"),
		metric.WithDescription("Grants held by this process."))
	in.lost, _ = m.Int64Counter("dlock.lost", metric.WithUnit("{grant}"),
		metric.WithDescription("Grants that ended without Unlock, by cause."))
	in.sessionEnded, _ = m.Int64Counter("dlock.session.ended", metric.WithUnit("{session}"),
		metric.WithDescription("etcd sessions that ended, by cause."))
	in.rejected, _ = m.Int64Counter("dlock.fence.rejected", metric.WithUnit("{token}"),
		metric.WithDescription("Fencing tokens a guard rejected as stale, by guard."))
	in.leader, _ = m.Int64UpDownCounter("dlock.election.leader", metric.WithUnit("{term}"),
		metric.WithDescription("Leadership terms this process holds (1 per election it leads)."))
	return in
}

// Config selects where telemetry goes; the zero value means the global
// providers and no logs.
type Config struct {
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	Logger         *slog.Logger
}

// T records the telemetry of one backend's objects. Its methods are safe
// for concurrent use; a nil *T records nothing.
type T struct {
	in      *instruments
	tracer  trace.Tracer
	log     *slog.Logger
	backend attribute.KeyValue
	set     []metric.AddOption // {dlock.backend}
	byOut   map[string][]metric.RecordOption
	client  []trace.SpanStartOption // {SpanKindClient}
}

// providers returns c's providers, each nil one replaced by its default:
// OpenTelemetry's global meter and tracer providers, a logger that
// discards.
func (c Config) providers() (metric.MeterProvider, trace.TracerProvider, *slog.Logger) {
	mp, tp, log := c.MeterProvider, c.TracerProvider, c.Logger
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return mp, tp, log
}

// New returns the telemetry of backend ("etcd", "redis", "redlock") for c.
func New(c Config, backend string) *T {
	mp, tp, log := c.providers()
	b := Backend.String(backend)
	t := &T{
		in: instrumentsOf(mp), tracer: tp.Tracer(Scope), log: log, backend: b,
		set:    []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(b))},
		byOut:  map[string][]metric.RecordOption{},
		client: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)},
	}
	for _, o := range []string{Granted, Locked, Canceled, Failed} {
		t.byOut[o] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(b, Outcome.String(o)))}
	}
	return t
}

// Logger returns the logger.
func (t *T) Logger() *slog.Logger { return t.log }

// Acquire is one acquire in progress: its span and its start.
type Acquire struct {
	t     *T
	span  trace.Span
	start time.Time
	name  string
}

// StartAcquire starts the span of an acquire (op: "lock", "try lock",
// "campaign", ...) of the object called name; the span's name is op's
// ("dlock.lock", "dlock.try_lock", ...).
func (t *T) StartAcquire(ctx context.Context, op, name string) (context.Context, Acquire) {
	ctx, span := t.tracer.Start(ctx, spanName(op), t.client...)
	return ctx, Acquire{t: t, span: span, start: time.Now(), name: name}
}

// spanName is the span name of op: "dlock." and op, with "_" for " ".
func spanName(op string) string {
	switch op { // the ops dlock has, without an allocation per acquire
	case "lock":
		return "dlock.lock"
	case "try lock":
		return "dlock.try_lock"
	case "acquire":
		return "dlock.acquire"
	case "try acquire":
		return "dlock.try_acquire"
	case "rlock":
		return "dlock.rlock"
	case "try rlock":
		return "dlock.try_rlock"
	case "campaign":
		return "dlock.campaign"
	}
	return "dlock." + strings.ReplaceAll(op, " ", "_")
}

// Recording reports whether the span records (so that extra attributes
// are worth their cost).
func (a Acquire) Recording() bool { return a.span.IsRecording() }

// Failed records a failed acquire: its duration by outcome, and the
// span's status.
func (a Acquire) Failed(outcome string, err error) {
	d := time.Since(a.start)
	a.t.in.acquire.Record(context.Background(), d.Seconds(), a.t.byOut[outcome]...)
	if a.span.IsRecording() {
		a.span.SetAttributes(a.t.backend, Lock.String(a.name), Outcome.String(outcome), WaitS.Float64(d.Seconds()))
		if outcome != Locked {
			a.span.RecordError(err)
			a.span.SetStatus(codes.Error, err.Error())
		}
	}
	a.span.End()
}

// Granted records a grant: the acquire's duration, and the span's token,
// wait, whether it had to wait behind another entry (dlock.queued) and, if
// known (ahead ≥ 0), how many entries were before it (dlock.ahead).
func (a Acquire) Granted(token uint64, queued bool, ahead int64) {
	d := time.Since(a.start)
	a.t.in.acquire.Record(context.Background(), d.Seconds(), a.t.byOut[Granted]...)
	if a.span.IsRecording() {
		attrs := append(make([]attribute.KeyValue, 0, 7), a.t.backend, Lock.String(a.name), Outcome.String(Granted),
			WaitS.Float64(d.Seconds()), Token.Int64(int64(token)), Queued.Bool(queued))
		if ahead >= 0 {
			attrs = append(attrs, Ahead.Int64(ahead))
		}
		a.span.SetAttributes(attrs...)
	}
	a.span.End()
}

// Held records a new grant (held goes up; DEBUG log).
func (t *T) Held(name string, token uint64) {
	ctx := context.Background()
	t.in.held.Add(ctx, 1, t.set...)
	if t.log.Enabled(ctx, slog.LevelDebug) {
		t.log.Debug("dlock: granted", "lock", name, "backend", t.backend.Value.AsString(), "token", token)
	}
}

// Ended records the end of a grant of the object called name: held goes
// down; lostCause, if not "", counts a loss and logs it (WARN); otherwise
// the release is logged (DEBUG).
func (t *T) Ended(name string, lostCause string, err error) {
	ctx := context.Background()
	t.in.held.Add(ctx, -1, t.set...)
	t.lostOrReleased(ctx, name, lostCause, err)
}

func (t *T) lostOrReleased(ctx context.Context, name, lostCause string, err error) {
	if lostCause == "" {
		if t.log.Enabled(ctx, slog.LevelDebug) {
			t.log.Debug("dlock: released", "lock", name, "backend", t.backend.Value.AsString())
		}
		return
	}
	t.in.lost.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(t.backend, Cause.String(lostCause))))
	t.log.Warn("dlock: lock lost", "lock", name, "backend", t.backend.Value.AsString(), "cause", lostCause, "err", err)
}

// Elected records a leadership term gained (the leader gauge goes up).
func (t *T) Elected(name string, epoch uint64) {
	t.in.leader.Add(context.Background(), 1, t.set...)
	t.log.Debug("dlock: elected", "election", name, "epoch", epoch)
}

// TermEnded records a term's end: the leader gauge goes down; a term that
// ended without Resign (lostCause not "") is logged at WARN.
func (t *T) TermEnded(name string, epoch uint64, lostCause string, err error) {
	t.in.leader.Add(context.Background(), -1, t.set...)
	if lostCause == "" {
		t.log.Debug("dlock: resigned", "election", name, "epoch", epoch)
		return
	}
	t.log.Warn("dlock: leadership lost", "election", name, "epoch", epoch, "cause", lostCause, "err", err)
}

// SessionEnded counts the end of an etcd session by cause.
func (t *T) SessionEnded(cause string) {
	t.in.sessionEnded.Add(context.Background(), 1, metric.WithAttributeSet(attribute.NewSet(t.backend, Cause.String(cause))))
}

// Guarded is the telemetry of a guard (which knows no backend). A nil
// *Guarded records nothing.
type Guarded struct {
	in     *instruments
	tracer trace.Tracer
	log    *slog.Logger
	set    []metric.AddOption // {dlock.guard}
	guard  attribute.KeyValue
	stale  error // errors.Is target of a rejected token
}

// Write runs fn, the guarded write (or admission) of the token of lock
// name with seq, under a span, and counts a rejection (an error matching
// stale). It returns fn's error.
func (g *Guarded) Write(ctx context.Context, name string, seq uint64, fn func(context.Context) error) error {
	if g == nil {
		return fn(ctx)
	}
	ctx, end := g.StartWrite(ctx, name, seq)
	err := fn(ctx)
	result := "admitted"
	switch {
	case errors.Is(err, g.stale):
		result = "rejected"
		g.Rejected(ctx)
		g.log.WarnContext(ctx, "dlock: stale fencing token rejected", "guard", g.guard.Value.AsString(), "lock", name, "token", seq, "err", err)
	case err != nil:
		result = "error"
	}
	end(result, err)
	return err
}

// NewGuard returns the telemetry of the guard called guard ("memory",
// "postgres", "redis", "http", "grpc"); stale is the error a rejected
// token matches (fence.ErrStaleToken).
func NewGuard(c Config, guard string, stale error) *Guarded {
	mp, tp, log := c.providers()
	g := Guard.String(guard)
	return &Guarded{in: instrumentsOf(mp), tracer: tp.Tracer(Scope), log: log, guard: g, set: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(g))}, stale: stale}
}

// Rejected counts a stale token the guard rejected.
func (g *Guarded) Rejected(ctx context.Context) {
	g.in.rejected.Add(ctx, 1, g.set...)
}

// Logger returns the guard's logger.
func (g *Guarded) Logger() *slog.Logger { return g.log }

// StartWrite starts the span of a guarded write with the token of lock
// name and seq; end it with the result ("admitted", "rejected", "error")
// and the write's error.
func (g *Guarded) StartWrite(ctx context.Context, name string, seq uint64) (context.Context, func(result string, err error)) {
	ctx, span := g.tracer.Start(ctx, "dlock.fence.write", trace.WithAttributes(g.guard, Lock.String(name), Token.Int64(int64(seq))))
	return ctx, func(result string, err error) {
		span.SetAttributes(Result.String(result))
		if err != nil && result != "rejected" {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}
