package lock

import (
	"fmt"
	"os"
	"strings"
)

// DefaultPrefix is the etcd key prefix under which Mutex keys live when
// WithPrefix is not given: keys are "<prefix>/<name>/<unique>".
const DefaultPrefix = "dlock/lock"

// Option configures a Mutex.
type Option func(*options)

type options struct {
	prefix string
	owner  string
}

func defaultOptions() options {
	host, _ := os.Hostname()
	return options{prefix: DefaultPrefix, owner: fmt.Sprintf("%s/%d", host, os.Getpid())}
}

// WithPrefix sets the etcd key prefix. Optional, defaults to DefaultPrefix.
// It must be non-empty, must not end with "/" and must not contain "%"
// (which escapes "/" in names and marks the session's epoch keys).
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithOwner sets the value stored in the lock's key, shown by inspection
// tools. Optional, defaults to "<hostname>/<pid>".
func WithOwner(owner string) Option { return func(o *options) { o.owner = owner } }

func (o *options) validate() error {
	if o.prefix == "" {
		return fmt.Errorf("%w: prefix is empty", ErrInvalidOption)
	}
	if strings.HasSuffix(o.prefix, "/") {
		return fmt.Errorf("%w: prefix %q must not end with '/'", ErrInvalidOption, o.prefix)
	}
	if strings.Contains(o.prefix, "%") {
		return fmt.Errorf("%w: prefix %q must not contain '%%'", ErrInvalidOption, o.prefix)
	}
	return nil
}
