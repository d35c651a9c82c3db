package grpcfence

import (
	"github.com/dlock-go/dlock/telemetry"
)

// Option configures the interceptors.
type Option func(*telemetry.Providers)

// WithTelemetry sets where the stale tokens rejected here are counted
// (dlock.fence.rejected, dlock.guard="grpc"; the guard wrapped counts its
// own) and logged (WARN: the rejection goes to the remote client, not to a
// caller here), and where the spans of the admissions go. Optional,
// defaults to the global OpenTelemetry providers and no logs.
func WithTelemetry(p telemetry.Providers) Option {
	return func(t *telemetry.Providers) { *t = p }
}

func guardTelemetry(name string, opts []Option) *telemetry.Fence {
	var p telemetry.Providers
	for _, o := range opts {
		if o != nil {
			o(&p)
		}
	}
	return telemetry.NewFence(name, p)
}
