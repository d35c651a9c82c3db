package telemetry

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/obs"
)

// Providers says where telemetry goes. The zero value means the global
// OpenTelemetry providers and no logs.
type Providers struct {
	// MeterProvider gives the meter of dlock's instruments. Optional; nil
	// means otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider gives the tracer of dlock's spans. Optional; nil
	// means otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Logger receives dlock's logs. Optional; nil means discarding them.
	Logger *slog.Logger
}

// Fence is the telemetry of one fencing guard. A nil *Fence records
// nothing. It is safe for concurrent use.
type Fence struct{ g *obs.Guarded }

// NewFence returns the telemetry of the guard called guard: the value of
// the dlock.guard attribute ("memory", "postgres", "redis", "http", "grpc",
// "s3", or a name of your own).
func NewFence(guard string, p Providers) *Fence {
	return &Fence{obs.NewGuard(obs.Config(p), guard, fence.ErrStaleToken)}
}

// Write runs fn, the guarded write (or admission) of t, under the span
// "dlock.fence.write", and counts a rejection (an error matching
// fence.ErrStaleToken) in dlock.fence.rejected, logged at WARN. It returns
// fn's error.
func (f *Fence) Write(ctx context.Context, t fence.Token, fn func(ctx context.Context) error) error {
	if f == nil {
		return fn(ctx)
	}
	return f.g.Write(ctx, t.Name, t.Seq, fn)
}

// FenceOf is NewFence with the Providers that opts set, applied in order
// to the zero Providers (a nil option is skipped): for a guard whose only
// options set its Providers and whose constructor returns no error, such
// as contrib/httpfence's Middleware and contrib/grpcfence's interceptors.
func FenceOf[O ~func(*Providers)](guard string, opts []O) *Fence {
	var p Providers
	for _, o := range opts {
		if o != nil {
			o(&p)
		}
	}
	return NewFence(guard, p)
}

// Guard returns g with every Admit recorded by a Fence called guard: for a
// guard without telemetry of its own, such as fence.MemoryGuard.
func Guard(g fence.Guard, guard string, p Providers) fence.Guard {
	return recorded{g: g, f: NewFence(guard, p)}
}

type recorded struct {
	g fence.Guard
	f *Fence
}

func (r recorded) Admit(ctx context.Context, t fence.Token) error {
	return r.f.Write(ctx, t, func(ctx context.Context) error { return r.g.Admit(ctx, t) })
}
