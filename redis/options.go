package redis

import (
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/names"
	"github.com/dlock-go/dlock/internal/obs"
	"github.com/dlock-go/dlock/internal/option"
	"github.com/dlock-go/dlock/telemetry"
)

// Defaults for the options, in one place.
const (
	// DefaultTTL is the lock validity when WithTTL is not given.
	DefaultTTL = 10 * time.Second
	// DefaultPrefix is the key prefix when WithPrefix is not given.
	DefaultPrefix = "dlock:"
	// DefaultRetryMin and DefaultRetryMax bound the jittered backoff between
	// acquire attempts when WithRetry is not given.
	DefaultRetryMin = 20 * time.Millisecond
	DefaultRetryMax = 500 * time.Millisecond
	// DefaultNodeTimeout bounds each command on a node when WithNodeTimeout
	// is not given.
	DefaultNodeTimeout = 200 * time.Millisecond
	// DefaultReplicaTimeout is WAIT's timeout when WithReplicas is given a
	// zero timeout.
	DefaultReplicaTimeout = 100 * time.Millisecond
	// MinTTL is the shortest TTL WithTTL accepts. A grant's validity is
	// the TTL less the drift allowance (1% and 2ms). It must outlast an
	// acquire whose round trip took the whole node timeout (200ms by
	// default), and then the renewal that auto-extension sends TTL/3
	// after the grant, taking the node timeout too:
	// 2 × 200ms + TTL/3 < 0.99 TTL − 2ms from 612ms on. 1s is the round
	// figure above that.
	MinTTL = time.Second
	// driftFactor is the share of the TTL subtracted from the local
	// validity for the clock rates of this process and the servers, as
	// in the Redlock algorithm; driftFloor is subtracted on top: the
	// resolution of Redis' expiry clock and ours.
	driftFactor = 0.01
	driftFloor  = 2 * time.Millisecond
)

// Option configures a Mutex or a Redlock. Options that apply to one of them
// only say so; the other ignores them.
type Option func(*options)

type options struct {
	ttl            time.Duration
	prefix         string
	retryMin       time.Duration
	retryMax       time.Duration
	nodeTimeout    time.Duration
	autoExtend     bool
	maxHold        time.Duration
	owner          string
	replicas       int
	replicaTimeout time.Duration
	tel            obs.Config
}

func defaults() options {
	return options{
		ttl:         DefaultTTL,
		prefix:      DefaultPrefix,
		retryMin:    DefaultRetryMin,
		retryMax:    DefaultRetryMax,
		nodeTimeout: DefaultNodeTimeout,
	}
}

// WithTTL sets the lock validity: the key expires on the server after ttl,
// and a grant's Done closes a little earlier (1% and 2ms less, counted from
// just before the acquire was sent). Optional, defaults to DefaultTTL
// (10s). It must be at least MinTTL (1s), for the reason MinTTL gives.
func WithTTL(ttl time.Duration) Option { return func(o *options) { o.ttl = ttl } }

// WithPrefix sets the key prefix under which the lock's keys live: the
// lock key is prefix+"{"+name+"}", and its other keys and channels add a
// suffix to it (the hash tag keeps them in one Cluster slot). Optional,
// defaults to DefaultPrefix ("dlock:"). It must not be empty or contain
// "{" or "}".
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithRetry bounds the jittered exponential backoff between Lock's
// attempts; a release notification wakes a waiter sooner. Optional,
// defaults to DefaultRetryMin (20ms) and DefaultRetryMax (500ms). min must
// be positive and max at least min.
func WithRetry(min, max time.Duration) Option {
	return func(o *options) { o.retryMin, o.retryMax = min, max }
}

// WithNodeTimeout bounds each command on a node: one without a reply by
// then fails (Lock retries; a Redlock call counts that node as failed), so
// a stalled node holds no call for longer. Optional, defaults to
// DefaultNodeTimeout (200ms). It must be positive, and for a Redlock
// shorter than the TTL.
func WithNodeTimeout(d time.Duration) Option { return func(o *options) { o.nodeTimeout = d } }

// WithAutoExtend starts a watchdog with every grant that extends it every
// TTL/3 until Unlock or loss. If maxHold is positive, the watchdog stops
// extending once the grant has been held that long, and the grant then ends
// at its deadline (at most one TTL later) unless extended by hand. Optional,
// defaults to off. maxHold must not be negative; 0 means no maximum.
func WithAutoExtend(maxHold time.Duration) Option {
	return func(o *options) { o.autoExtend, o.maxHold = true, maxHold }
}

// WithOwner sets the owner stored with every grant, so that inspection
// tools show who holds the lock: in the lock key's value, after the
// grant's random value and a space. Optional, defaults to none. It must be
// printable ASCII without spaces, at most 256 bytes.
func WithOwner(owner string) Option { return func(o *options) { o.owner = owner } }

// WithReplicas makes a Mutex grant (on a *goredis.Client or ClusterClient)
// count only once n replicas acknowledged it (WAIT n timeout); otherwise
// it is released and TryLock returns ErrNotReplicated (Lock retries). It
// narrows, not closes, the window in which a failover loses a grant.
// Optional, defaults to 0; a zero timeout means DefaultReplicaTimeout.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(o *options) { o.replicas, o.replicaTimeout = n, timeout }
}

// WithTelemetry sets where the lock's metrics, spans and logs go (see
// package telemetry): dlock.acquire.duration, dlock.held and dlock.lost
// (dlock.backend "redis" or "redlock"), a span per Lock and TryLock, grants
// and releases at DEBUG and losses at WARN. Optional, defaults to the zero
// Providers: the global OpenTelemetry providers and no logs.
func WithTelemetry(p telemetry.Providers) Option { return func(o *options) { o.tel = obs.Config(p) } }

func (o *options) driftAllowance() time.Duration {
	return time.Duration(float64(o.ttl)*driftFactor) + driftFloor
}

// build validates name and applies opts to the defaults, then validates
// the result (see validate).
func build(name string, opts []Option, redlock bool) (options, error) {
	o := defaults()
	if err := names.Name(name); err != nil {
		return o, fmt.Errorf("%w: %w", ErrInvalidName, err)
	}
	if err := option.Apply(&o, opts); err != nil {
		return o, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return o, o.validate(redlock)
}

// validate checks the options; redlock adds the checks that only Redlock needs.
func (o *options) validate(redlock bool) error {
	if o.ttl <= 0 {
		return fmt.Errorf("%w: ttl %v must be positive", ErrInvalidOption, o.ttl)
	}
	if o.ttl < MinTTL {
		return fmt.Errorf("%w: ttl %v is below the minimum %v: the validity (ttl less the drift allowance, 1%% + 2ms) must outlast an acquire and a renewal at ttl/3 that each take the node timeout",
			ErrInvalidOption, o.ttl, MinTTL)
	}
	if err := names.RedisPrefix(o.prefix); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if o.retryMin <= 0 {
		return fmt.Errorf("%w: retry min %v must be positive", ErrInvalidOption, o.retryMin)
	}
	if o.retryMax < o.retryMin {
		return fmt.Errorf("%w: retry max %v must be at least retry min %v", ErrInvalidOption, o.retryMax, o.retryMin)
	}
	if o.nodeTimeout <= 0 {
		return fmt.Errorf("%w: node timeout %v must be positive", ErrInvalidOption, o.nodeTimeout)
	}
	if redlock && o.replicas > 0 {
		return fmt.Errorf("%w: replicas: WithReplicas is for the single-node Mutex, not Redlock", ErrInvalidOption)
	}
	if redlock && o.nodeTimeout >= o.ttl {
		return fmt.Errorf("%w: node timeout %v must be shorter than ttl %v", ErrInvalidOption, o.nodeTimeout, o.ttl)
	}
	if o.maxHold < 0 {
		return fmt.Errorf("%w: auto-extend max hold %v must not be negative", ErrInvalidOption, o.maxHold)
	}
	if err := names.Owner(o.owner); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if o.replicas < 0 {
		return fmt.Errorf("%w: replicas %d must not be negative", ErrInvalidOption, o.replicas)
	}
	if o.replicaTimeout < 0 {
		return fmt.Errorf("%w: replica timeout %v must not be negative", ErrInvalidOption, o.replicaTimeout)
	}
	if o.replicaTimeout == 0 {
		o.replicaTimeout = DefaultReplicaTimeout
	}
	return nil
}
