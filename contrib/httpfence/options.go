package httpfence

import (
	"log/slog"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/internal/telemetry"
)

// Option configures Middleware.
type Option func(*telemetry.Config)

// WithMeterProvider sets where the middleware counts the stale tokens it
// answers 409 to (dlock.fence.rejected, dlock.guard="http"; the guard it
// wraps counts its own). Optional, defaults to otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *telemetry.Config) { c.MeterProvider = mp }
}

// WithTracerProvider sets where the middleware's spans go (one per
// admission, with the token and the result). Optional, defaults to
// otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *telemetry.Config) { c.TracerProvider = tp }
}

// WithLogger sets the logger of rejected stale tokens (WARN: the
// rejection goes to the remote client, not to a caller here). Optional,
// defaults to discarding.
func WithLogger(l *slog.Logger) Option { return func(c *telemetry.Config) { c.Logger = l } }

func guardTelemetry(name string, opts []Option) *telemetry.Guarded {
	var c telemetry.Config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return telemetry.NewGuard(c, name, fence.ErrStaleToken)
}
