package election

import (
	"fmt"
	"strings"
)

// DefaultPrefix is the etcd key prefix under which candidates' keys live
// when WithPrefix is not given: keys are "<prefix>/<name>/<unique>".
const DefaultPrefix = "dlock/election"

// Option configures an Election (New) or the elections Run makes
// (Config.Options).
type Option func(*options)

type options struct {
	prefix string
	// readHook, test-only, is called by Observe after each read of the
	// election's keys, with the read's revision, before it starts watching.
	readHook func(rev int64)
}

func defaultOptions() options {
	return options{prefix: DefaultPrefix}
}

// WithPrefix sets the etcd key prefix. Optional, defaults to DefaultPrefix.
// It must be non-empty, must not end with "/" and must not contain "%"
// (which escapes "/" in names and marks the session's epoch keys).
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

func withReadHook(f func(rev int64)) Option { return func(o *options) { o.readHook = f } }

func buildOptions(opts []Option) (options, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			return o, fmt.Errorf("%w: nil Option", ErrInvalidOption)
		}
		opt(&o)
	}
	if o.prefix == "" {
		return o, fmt.Errorf("%w: prefix is empty", ErrInvalidOption)
	}
	if strings.HasSuffix(o.prefix, "/") {
		return o, fmt.Errorf("%w: prefix %q must not end with '/'", ErrInvalidOption, o.prefix)
	}
	if strings.Contains(o.prefix, "%") {
		return o, fmt.Errorf("%w: prefix %q must not contain '%%'", ErrInvalidOption, o.prefix)
	}
	return o, nil
}
