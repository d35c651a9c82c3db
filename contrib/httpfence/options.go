package httpfence

import (
	"github.com/dlock-go/dlock/telemetry"
)

// Option configures Middleware. A nil Option is skipped: Middleware
// returns no error.
type Option func(*telemetry.Providers)

// WithTelemetry sets where the guard's metrics, spans and logs go (see
// package telemetry): dlock.fence.rejected (dlock.guard "http"; the guard
// wrapped counts its own) with each rejected token logged at WARN (the
// rejection goes to the remote client, not to a caller here), and a span
// per admission. Optional, defaults to the zero Providers: the global
// OpenTelemetry providers and no logs.
func WithTelemetry(p telemetry.Providers) Option {
	return func(t *telemetry.Providers) { *t = p }
}
