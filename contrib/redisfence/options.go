package redisfence

import (
	"fmt"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-go/dlock/internal/telemetry"
)

// DefaultPrefix is the prefix of fence keys when WithPrefix is not given.
const DefaultPrefix = "dlock:fence:"

// Option configures a Guard.
type Option func(*options) error

type options struct {
	prefix string
	tel    telemetry.Config
}

func defaults() options { return options{prefix: DefaultPrefix} }

// WithPrefix sets the prefix of fence keys: the key for lock name n is
// prefix+n. It must not be empty. Optional, defaults to DefaultPrefix.
func WithPrefix(prefix string) Option {
	return func(o *options) error {
		if prefix == "" {
			return fmt.Errorf("%w: WithPrefix: prefix is empty", ErrInvalidOption)
		}
		o.prefix = prefix
		return nil
	}
}

// WithMeterProvider sets where the guard counts the tokens it rejects
// (dlock.fence.rejected, dlock.guard="redis"). Optional, defaults to
// otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) error { o.tel.MeterProvider = mp; return nil }
}

// WithTracerProvider sets where the guard's spans go (one per guarded
// write, with the token and the result). Optional, defaults to
// otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) error { o.tel.TracerProvider = tp; return nil }
}
