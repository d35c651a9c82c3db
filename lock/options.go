package lock

import (
	"fmt"
	"os"

	"github.com/dlock-go/dlock/internal/option"

	"github.com/dlock-go/dlock/internal/names"
)

// DefaultPrefix is the etcd key prefix under which Mutex keys live when
// WithPrefix is not given: keys are "<prefix>/<name>/<unique>".
const DefaultPrefix = "dlock/lock"

// Option configures a Mutex (and the other etcd locks of this package).
type Option func(*options)

type options struct {
	prefix string
	owner  string
}

// DefaultOwner returns the owner stored with grants when WithOwner is not
// given: "<hostname>/<pid>", with any byte WithOwner would refuse written
// "_".
func DefaultOwner() string {
	host, _ := os.Hostname()
	b := []byte(fmt.Sprintf("%s/%d", host, os.Getpid()))
	for i, c := range b {
		if c <= ' ' || c > '~' {
			b[i] = '_'
		}
	}
	return string(b[:min(len(b), names.MaxOwnerLen)])
}

// ValidateOptions reports whether New (and the other constructors of this
// package) would accept opts, without I/O: errors match ErrInvalidOption
// and name the option.
func ValidateOptions(opts ...Option) error {
	_, err := buildOptions(opts)
	return err
}

// buildOptions applies opts to the defaults and validates the result:
// errors match ErrInvalidOption and name the option.
func buildOptions(opts []Option) (options, error) {
	o := options{prefix: DefaultPrefix, owner: DefaultOwner()}
	if err := option.Apply(&o, opts); err != nil {
		return o, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if err := names.EtcdPrefix(o.prefix); err != nil {
		return o, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if err := names.Owner(o.owner); err != nil {
		return o, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return o, nil
}

// WithPrefix sets the etcd key prefix. Optional, defaults to DefaultPrefix.
// It must be non-empty, must not end with "/" and must not contain "%"
// (which escapes "/" in names and marks a queue's side keys).
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithOwner sets the value stored in the lock's key, shown by inspection
// tools. Optional, defaults to DefaultOwner(). It must be printable ASCII
// without spaces, at most 256 bytes.
func WithOwner(owner string) Option { return func(o *options) { o.owner = owner } }
