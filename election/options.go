package election

import (
	"github.com/dlock-go/dlock/internal/grant"
	"github.com/dlock-go/dlock/internal/obs"
	"github.com/dlock-go/dlock/telemetry"
)

// DefaultPrefix is the key prefix when WithPrefix is not given.
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

// WithPrefix sets the key prefix under which the election's keys live:
// "<prefix>/<name>/<unique>". Optional, defaults to DefaultPrefix
// ("dlock/election"). It must not be empty, end with "/" or contain "%"
// (which escapes "/" in names and marks a queue's side keys).
func WithPrefix(prefix string) Option { return func(o *options) { o.Prefix = prefix } }

// WithTelemetry sets where the election's metrics, spans and logs go (see
// package telemetry): dlock.acquire.duration (for Campaign) and
// dlock.election.leader, a span per Campaign, terms gained and resigned at
// DEBUG and lost at WARN. Optional, defaults to the zero Providers: the
// global OpenTelemetry providers and no logs.
func WithTelemetry(p telemetry.Providers) Option { return func(o *options) { o.Tel = obs.Config(p) } }

func withReadHook(f func(rev int64)) Option { return func(o *options) { o.readHook = f } }
