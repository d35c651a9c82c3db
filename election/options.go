package election

import (
	"github.com/dlock-go/dlock/internal/grant"
	"github.com/dlock-go/dlock/internal/obs"
	"github.com/dlock-go/dlock/telemetry"
)

// DefaultPrefix is the etcd key prefix under which candidates' keys live
// when WithPrefix is not given: keys are "<prefix>/<name>/<unique>".
const DefaultPrefix = "dlock/election"

// Option configures an Election (New) or the elections Run makes
// (Config.Options).
type Option func(*options)

type options struct {
	grant.Options
	// readHook, test-only, is called by Observe after each read of the
	// election's keys, with the read's revision, before it starts watching.
	readHook func(rev int64)
}

func defaults() options { return options{Options: grant.Options{Prefix: DefaultPrefix}} }

// WithPrefix sets the etcd key prefix. Optional, defaults to DefaultPrefix.
// It must be non-empty, must not end with "/" and must not contain "%"
// (which escapes "/" in names and marks a queue's side keys).
func WithPrefix(prefix string) Option { return func(o *options) { o.Prefix = prefix } }

// WithTelemetry sets where the election's metrics (dlock.acquire.duration
// for Campaign, dlock.election.leader), spans (one per Campaign) and logs
// (terms gained and resigned at DEBUG, lost at WARN) go. Optional,
// defaults to the global OpenTelemetry providers and no logs.
func WithTelemetry(p telemetry.Providers) Option { return func(o *options) { o.Tel = obs.Config(p) } }

func withReadHook(f func(rev int64)) Option { return func(o *options) { o.readHook = f } }
