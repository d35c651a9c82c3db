package redisfence

import (
	"fmt"

	"github.com/dlock-go/dlock/telemetry"
)

// DefaultPrefix is the prefix of fence keys when WithPrefix is not given.
const DefaultPrefix = "dlock:fence:"

// Option configures a Guard.
type Option func(*options) error

type options struct {
	prefix string
	tel    telemetry.Providers
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

// WithTelemetry sets where the guard's rejected tokens are counted
// (dlock.fence.rejected, dlock.guard="redis") and logged (WARN), and where
// the spans of its guarded writes go. Optional, defaults to the global
// OpenTelemetry providers and no logs.
func WithTelemetry(p telemetry.Providers) Option {
	return func(o *options) error { o.tel = p; return nil }
}
