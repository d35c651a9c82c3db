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

// DefaultPrefix is the key prefix when WithPrefix is not given.
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

// WithPrefix sets the key prefix under which the lock's keys live:
// "<prefix>/<name>/<unique>". Optional, defaults to DefaultPrefix
// ("dlock/lock"). It must not be empty, end with "/" or contain "%"
// (which escapes "/" in names and marks a queue's side keys).
func WithPrefix(prefix string) Option { return func(o *options) { o.Prefix = prefix } }

// WithLockDelay makes a Mutex (its TryLock too) wait, after a grant ended
// without Unlock (its session expired or was revoked), until d after that
// end before granting again; a clean Unlock causes no delay. Set it on
// every Mutex of the name (other locks ignore it); see docs/locks.md.
// Optional, defaults to 0 (no delay); it must not be negative.
func WithLockDelay(d time.Duration) Option { return func(o *options) { o.lockDelay = d } }

// WithTelemetry sets where the lock's metrics, spans and logs go (see
// package telemetry): dlock.acquire.duration, dlock.held and dlock.lost, a
// span per acquire, grants at DEBUG and losses at WARN. Optional, defaults
// to the zero Providers: the global OpenTelemetry providers and no logs.
func WithTelemetry(p telemetry.Providers) Option { return func(o *options) { o.Tel = obs.Config(p) } }

// WithOwner sets the owner stored with every grant, so that inspection
// tools show who holds the lock: the value of the grant's key. Optional,
// defaults to "<hostname>/<pid>". It must be printable ASCII without
// spaces, at most 256 bytes.
func WithOwner(owner string) Option { return func(o *options) { o.owner = owner } }
