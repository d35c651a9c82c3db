package redisfence

import (
	"fmt"

	"github.com/dlock-go/dlock/telemetry"
)

// DefaultPrefix is the key prefix when WithPrefix is not given.
const DefaultPrefix = "dlock:fence:"

// Option configures a Guard.
type Option func(*options) error

type options struct {
	prefix string
	tel    telemetry.Providers
}

func defaults() options { return options{prefix: DefaultPrefix} }

// WithPrefix sets the key prefix under which the guard's keys live: the
// key of lock name n is prefix+n. Optional, defaults to DefaultPrefix
// ("dlock:fence:"). It must not be empty.
func WithPrefix(prefix string) Option {
	return func(o *options) error {
		if prefix == "" {
			return fmt.Errorf("%w: WithPrefix: prefix is empty", ErrInvalidOption)
		}
		o.prefix = prefix
		return nil
	}
}

// WithTelemetry sets where the guard's metrics, spans and logs go (see
// package telemetry): dlock.fence.rejected (dlock.guard "redis") with each
// rejected token logged at WARN, and a span per guarded write. Optional,
// defaults to the zero Providers: the global OpenTelemetry providers and no
// logs.
func WithTelemetry(p telemetry.Providers) Option {
	return func(o *options) error { o.tel = p; return nil }
}
