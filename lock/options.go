package lock

import (
	"fmt"
	"os"
	"time"

	"github.com/dlock-go/dlock/telemetry"

	"github.com/dlock-go/dlock/internal/obs"
	"github.com/dlock-go/dlock/internal/option"

	"github.com/dlock-go/dlock/internal/names"
)

// DefaultPrefix is the etcd key prefix under which Mutex keys live when
// WithPrefix is not given: keys are "<prefix>/<name>/<unique>".
const DefaultPrefix = "dlock/lock"

// Option configures a Mutex (and the other etcd locks of this package).
type Option func(*options)

type options struct {
	prefix    string
	owner     string
	lockDelay time.Duration
	tel       obs.Config
}

// defaultOwner returns the owner stored with grants when WithOwner is not
// given: "<hostname>/<pid>", with any byte WithOwner would refuse written
// "_".
func defaultOwner() string {
	host, _ := os.Hostname()
	b := []byte(fmt.Sprintf("%s/%d", host, os.Getpid()))
	for i, c := range b {
		if c <= ' ' || c > '~' {
			b[i] = '_'
		}
	}
	return string(b[:min(len(b), names.MaxOwnerLen)])
}

// buildOptions applies opts to the defaults and validates the result:
// errors match ErrInvalidOption and name the option.
func buildOptions(opts []Option) (options, error) {
	o := options{prefix: DefaultPrefix, owner: defaultOwner()}
	if err := option.Apply(&o, opts); err != nil {
		return o, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if err := names.EtcdPrefix(o.prefix); err != nil {
		return o, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if err := names.Owner(o.owner); err != nil {
		return o, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if o.lockDelay < 0 {
		return o, fmt.Errorf("%w: lock delay %v must not be negative", ErrInvalidOption, o.lockDelay)
	}
	return o, nil
}

// WithPrefix sets the etcd key prefix. Optional, defaults to DefaultPrefix.
// It must be non-empty, must not end with "/" and must not contain "%"
// (which escapes "/" in names and marks a queue's side keys).
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithLockDelay makes a Mutex wait, after a grant ends WITHOUT Unlock
// (its session expired or its lease was revoked: the holder may be paused
// or cut off, still acting), until d after that end before granting the
// lock again. A clean Unlock marks itself (in the same transaction as its
// delete) and causes no delay. Optional, defaults to 0 (no delay); it must
// not be negative. Other etcd locks of this package ignore it.
//
// What it buys: a bound on the pause a holder of a resource that cannot
// check a fencing token may have. A holder that checks Done before each
// write stops at its session's local deadline, which comes at least the
// safety margin before etcd expires the lease; its successor is granted d
// after that expiry. So a pause between the check and the write overlaps
// the successor only if it is longer than d plus the margin; without
// lock-delay, longer than the margin alone. What it does not buy: safety
// against a longer pause (only a fenced resource gives that), or against
// clocks whose rates differ by more than the margin. Its cost: when a
// holder dies, the lock is free only d after etcd expires its lease, and
// each grant reads the lock's delay marks once more.
//
// Set it on every Mutex of the name: a grant made by a Mutex without it
// leaves no mark, so its end without Unlock delays nobody, and a Mutex
// without it does not wait. An attempt whose session ended while it still
// waited counts as a grant that ended without Unlock. A Lock (or TryLock,
// which then waits too) that finds such an end already behind it waits d
// from then: etcd keeps no time for a deletion, so this may wait up to d
// longer than needed, once.
func WithLockDelay(d time.Duration) Option { return func(o *options) { o.lockDelay = d } }

// WithTelemetry sets where the lock's metrics (dlock.acquire.duration,
// dlock.held, dlock.lost), spans (one per acquire) and logs (grants at
// DEBUG, losses at WARN) go. Optional, defaults to the global
// OpenTelemetry providers and no logs.
func WithTelemetry(p telemetry.Providers) Option { return func(o *options) { o.tel = obs.Config(p) } }

// WithOwner sets the value stored in the lock's key, shown by inspection
// tools. Optional, defaults to defaultOwner(). It must be printable ASCII
// without spaces, at most 256 bytes.
func WithOwner(owner string) Option { return func(o *options) { o.owner = owner } }
