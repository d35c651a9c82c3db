package s3fence

import (
	"fmt"
	"time"

	"github.com/dlock-go/dlock/telemetry"
)

const (
	// DefaultMaxAttempts is how many conditional PUTs one Put makes at most
	// when WithMaxAttempts is not given.
	DefaultMaxAttempts = 50

	// DefaultProbePrefix is where New and Verify put their probe objects
	// when WithProbePrefix is not given.
	DefaultProbePrefix = ".dlock-s3fence-probe/"
)

// Option configures a Guard (and Verify).
type Option func(*options) error

type options struct {
	maxAttempts    int
	attemptTimeout time.Duration
	probePrefix    string
	tel            telemetry.Providers
}

func defaults() options {
	return options{maxAttempts: DefaultMaxAttempts, probePrefix: DefaultProbePrefix}
}

func apply(opts []Option) (options, error) {
	o := defaults()
	for _, opt := range opts {
		if opt == nil {
			return o, fmt.Errorf("%w: nil Option", ErrInvalidArgument)
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// WithMaxAttempts bounds the conditional PUTs of one Put: a PUT that loses
// a race against another write (412, 409) is retried after a re-read, as
// long as the token is still current. n must be at least 1. Optional,
// defaults to DefaultMaxAttempts.
func WithMaxAttempts(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("%w: WithMaxAttempts(%d): must be at least 1", ErrInvalidArgument, n)
		}
		o.maxAttempts = n
		return nil
	}
}

// WithAttemptTimeout bounds each PUT of a Put. When one times out while
// Put's ctx is still live, Put reads the object's metadata: if its write
// ID is there the write landed and Put returns nil; if not, Put tries
// again. It must not be negative. Optional, defaults to 0: each PUT is
// bounded by Put's ctx alone.
func WithAttemptTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("%w: WithAttemptTimeout(%v): negative", ErrInvalidArgument, d)
		}
		o.attemptTimeout = d
		return nil
	}
}

// WithProbePrefix sets the key prefix of the probe objects that New and
// Verify write and delete, for credentials limited to a prefix. It must
// not be empty. Optional, defaults to DefaultProbePrefix.
func WithProbePrefix(prefix string) Option {
	return func(o *options) error {
		if prefix == "" {
			return fmt.Errorf("%w: WithProbePrefix: prefix is empty", ErrInvalidArgument)
		}
		o.probePrefix = prefix
		return nil
	}
}

// WithTelemetry sets where the guard's metrics, spans and logs go (see
// package telemetry): dlock.fence.rejected (dlock.guard "s3") with each
// rejected token logged at WARN, and a span per guarded write. Optional,
// defaults to the zero Providers: the global OpenTelemetry providers and no
// logs.
func WithTelemetry(p telemetry.Providers) Option {
	return func(o *options) error { o.tel = p; return nil }
}
