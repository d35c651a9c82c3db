package grpcfence

import (
	"github.com/dlock-go/dlock/telemetry"
)

// Option configures the interceptors. A nil Option is skipped: the
// interceptors' constructors return no error.
type Option func(*telemetry.Providers)

// WithTelemetry sets where the guard's metrics, spans and logs go (see
// package telemetry): dlock.fence.rejected (dlock.guard "grpc"; the guard
// wrapped counts its own) with each rejected token logged at WARN (the
// rejection goes to the remote client, not to a caller here), and a span
// per admission. Optional, defaults to the zero Providers: the global
// OpenTelemetry providers and no logs.
func WithTelemetry(p telemetry.Providers) Option {
	return func(t *telemetry.Providers) { *t = p }
}
