package lock

import (
	"fmt"
	"os"
	"time"

	"github.com/dlock-go/dlock/internal/grant"
	"github.com/dlock-go/dlock/internal/names"
	"github.com/dlock-go/dlock/internal/obs"
	"github.com/dlock-go/dlock/internal/option"
	"github.com/dlock-go/dlock/session"
	"github.com/dlock-go/dlock/telemetry"
)

// DefaultPrefix is the etcd key prefix under which Mutex keys live when
// WithPrefix is not given: keys are "<prefix>/<name>/<unique>".
const DefaultPrefix = "dlock/lock"

// Option configures a Mutex (and the other etcd locks of this package).
type Option func(*options)

type options struct {
	grant.Options
	owner     string
	lockDelay time.Duration
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

// newBase is the construction every etcd lock of this package shares
// (grant.New): it checks src, name and opts, and returns the lock's base.
func newBase(src session.Source, name string, opts []Option) (base, error) {
	o := options{Options: grant.Options{Prefix: DefaultPrefix}, owner: defaultOwner()}
	p, err := grant.New(src, name, &o.Options, sentinels, func() error {
		if err := option.Apply(&o, opts); err != nil {
			return err
		}
		if err := names.Owner(o.owner); err != nil {
			return err
		}
		if o.lockDelay < 0 {
			return fmt.Errorf("lock delay %v must not be negative", o.lockDelay)
		}
		return nil
	})
	return base{opts: o, path: p}, err
}

// WithPrefix sets the etcd key prefix. Optional, defaults to DefaultPrefix.
// It must be non-empty, must not end with "/" and must not contain "%"
// (which escapes "/" in names and marks a queue's side keys).
func WithPrefix(prefix string) Option { return func(o *options) { o.Prefix = prefix } }

// WithLockDelay makes a Mutex (its TryLock too) wait, after a grant ended
// without Unlock (its session expired or was revoked), until d after that
// end before granting again; a clean Unlock causes no delay. Set it on
// every Mutex of the name (other locks ignore it); see docs/locks.md.
// Optional, defaults to 0 (no delay); it must not be negative.
func WithLockDelay(d time.Duration) Option { return func(o *options) { o.lockDelay = d } }

// WithTelemetry sets where the lock's metrics (dlock.acquire.duration,
// dlock.held, dlock.lost), spans (one per acquire) and logs (grants at
// DEBUG, losses at WARN) go. Optional, defaults to the global
// OpenTelemetry providers and no logs.
func WithTelemetry(p telemetry.Providers) Option { return func(o *options) { o.Tel = obs.Config(p) } }

// WithOwner sets the value stored in the lock's key, shown by inspection
// tools. Optional, defaults to "<hostname>/<pid>". It must be printable
// ASCII without spaces, at most 256 bytes.
func WithOwner(owner string) Option { return func(o *options) { o.owner = owner } }
