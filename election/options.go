package election

import (
	"fmt"

	"github.com/dlock-go/dlock/telemetry"

	"github.com/dlock-go/dlock/internal/obs"
	"github.com/dlock-go/dlock/internal/option"

	"github.com/dlock-go/dlock/internal/names"
)

// DefaultPrefix is the etcd key prefix under which candidates' keys live
// when WithPrefix is not given: keys are "<prefix>/<name>/<unique>".
const DefaultPrefix = "dlock/election"

// Option configures an Election (New) or the elections Run makes
// (Config.Options).
type Option func(*options)

type options struct {
	prefix string
	tel    obs.Config
	// readHook, test-only, is called by Observe after each read of the
	// election's keys, with the read's revision, before it starts watching.
	readHook func(rev int64)
}

func defaultOptions() options {
	return options{prefix: DefaultPrefix}
}

// WithPrefix sets the etcd key prefix. Optional, defaults to DefaultPrefix.
// It must be non-empty, must not end with "/" and must not contain "%"
// (which escapes "/" in names and marks a queue's side keys).
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithTelemetry sets where the election's metrics (dlock.acquire.duration
// for Campaign, dlock.election.leader), spans (one per Campaign) and logs
// (terms gained and resigned at DEBUG, lost at WARN) go. Optional,
// defaults to the global OpenTelemetry providers and no logs.
func WithTelemetry(p telemetry.Providers) Option { return func(o *options) { o.tel = obs.Config(p) } }

func withReadHook(f func(rev int64)) Option { return func(o *options) { o.readHook = f } }

func buildOptions(opts []Option) (options, error) {
	o := defaultOptions()
	if err := option.Apply(&o, opts); err != nil {
		return o, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if err := names.EtcdPrefix(o.prefix); err != nil {
		return o, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return o, nil
}
