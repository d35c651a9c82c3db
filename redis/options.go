package redis

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-go/dlock/internal/names"
	"github.com/dlock-go/dlock/internal/obs"
	"github.com/dlock-go/dlock/internal/option"
)

// Defaults for the options, in one place.
const (
	// DefaultTTL is the lock validity when WithTTL is not given.
	DefaultTTL = 10 * time.Second
	// DefaultKeyPrefix is the key prefix when WithKeyPrefix is not given.
	DefaultKeyPrefix = "dlock:"
	// DefaultRetryMin and DefaultRetryMax bound the jittered backoff between
	// acquire attempts when WithRetry is not given.
	DefaultRetryMin = 20 * time.Millisecond
	DefaultRetryMax = 500 * time.Millisecond
	// DefaultDriftFactor is the share of the TTL subtracted from the local
	// validity for clock drift when WithDriftFactor is not given (2ms are
	// always subtracted on top, as in the Redlock algorithm).
	DefaultDriftFactor = 0.01
	// MaxDriftFactor bounds WithDriftFactor (exclusive).
	MaxDriftFactor = 0.5
	// DefaultNodeTimeout bounds how long a Redlock call waits for each
	// node, and a Mutex command (on a client that honours ctx deadlines) or
	// how long a Mutex call still waits for its node after its ctx ended
	// (on other clients), when WithNodeTimeout is not given. It also bounds how long
	// a waiting Lock waits for its subscription to release notifications
	// to be confirmed.
	DefaultNodeTimeout = 200 * time.Millisecond
	// DefaultReplicaTimeout is WAIT's timeout when WithReplicas is given a
	// zero timeout.
	DefaultReplicaTimeout = 100 * time.Millisecond
	// driftFloor is subtracted from every validity on top of the drift
	// factor: the resolution of Redis' expiry clock and ours.
	driftFloor = 2 * time.Millisecond
)

// Option configures a Mutex or a Redlock. Options that apply to one of them
// only say so; the other ignores them.
type Option func(*options)

type options struct {
	ttl            time.Duration
	prefix         string
	retryMin       time.Duration
	retryMax       time.Duration
	drift          float64
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
		prefix:      DefaultKeyPrefix,
		retryMin:    DefaultRetryMin,
		retryMax:    DefaultRetryMax,
		drift:       DefaultDriftFactor,
		nodeTimeout: DefaultNodeTimeout,
	}
}

// WithTTL sets the lock validity: the key expires on the server after ttl,
// and the grant's Done closes a little earlier (ttl minus the drift, counted
// from before the acquire was sent). Optional, defaults to DefaultTTL (10s).
// It must be positive and longer than the drift it implies.
func WithTTL(ttl time.Duration) Option { return func(o *options) { o.ttl = ttl } }

// WithKeyPrefix sets the prefix of every key and channel: the lock key is
// prefix+"{"+name+"}", its token counter the same plus ":seq", a Mutex's
// waiters (a sorted set) the same plus ":waiters" and each waiter's
// channel plus ":w:" and the waiter's ID, a Redlock's release channel
// plus ":released". The braces make them one Redis Cluster hash slot. Optional, defaults to DefaultKeyPrefix ("dlock:"). It must not
// contain '{' or '}'.
func WithKeyPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithRetry sets the bounds of the jittered exponential backoff between
// acquire attempts in Lock. A waiter is also woken by the release
// notification, so the backoff matters only when that is missed (expiry,
// a lost subscription). Optional, defaults to DefaultRetryMin (20ms) and
// DefaultRetryMax (500ms). min must be positive and max at least min.
func WithRetry(min, max time.Duration) Option {
	return func(o *options) { o.retryMin, o.retryMax = min, max }
}

// WithDriftFactor sets the share of the TTL by which the local validity is
// shortened to allow for clock rate differences between this process and
// the Redis servers (plus 2ms). Optional, defaults to DefaultDriftFactor
// (0.01). It must be in [0, MaxDriftFactor).
func WithDriftFactor(f float64) Option { return func(o *options) { o.drift = f } }

// WithNodeTimeout bounds how long a Redlock call (acquire, extend, release)
// waits for the nodes: one that has not answered by then counts as failed
// for the call, whatever its client's own timeouts, so that a dead or
// stalled node costs at most this much of the validity. A call decides
// sooner when the answers so far settle it (a majority acted, or cannot);
// the requests it did not wait for finish in the background (see the
// package documentation, "Stragglers"). The request's ctx carries the same
// deadline, for clients that honour it. On a Mutex whose client honours
// ctx deadlines (ContextTimeoutEnabled) it caps each command's deadline,
// when the caller's ctx can end: a command that has no reply by then
// fails. On other clients it bounds how long a call still waits for its
// node after the caller's ctx ended (so that it can learn the outcome and
// clean up) before it returns and leaves the command to the background.
// Optional, defaults to DefaultNodeTimeout
// (200ms). It must be positive, and for a Redlock shorter than the TTL.
func WithNodeTimeout(d time.Duration) Option { return func(o *options) { o.nodeTimeout = d } }

// WithAutoExtend starts a watchdog with every grant that extends it every
// TTL/3 until Unlock or loss. If maxHold is positive, the watchdog stops
// extending once the grant has been held that long, and the grant then ends
// at its deadline (at most one TTL later) unless extended by hand. Optional,
// defaults to off. maxHold must not be negative; 0 means no maximum.
func WithAutoExtend(maxHold time.Duration) Option {
	return func(o *options) { o.autoExtend, o.maxHold = true, maxHold }
}

// WithOwner stores owner (for example "host-3/pid-42") with every grant, so
// operators can see who holds a lock (Mutex.Owner). Optional, defaults to
// none. It must be printable ASCII without spaces, at most 256 bytes.
func WithOwner(owner string) Option { return func(o *options) { o.owner = owner } }

// WithReplicas makes a single-node grant count only after n replicas
// acknowledged it (WAIT n timeout); otherwise the grant is released and
// Lock retries (TryLock returns ErrNotReplicated). It narrows, but does not
// close, the window in which a failover loses the lock: WAIT does not make
// Redis replication synchronous. Mutex only; the client must be a
// *goredis.Client (plain or failover) or a *goredis.ClusterClient.
// Optional, defaults to 0 (no WAIT). n must not be negative; a zero timeout
// means DefaultReplicaTimeout (100ms), a negative one is an error.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(o *options) { o.replicas, o.replicaTimeout = n, timeout }
}

// WithMeterProvider sets where the lock's metrics go (the instruments of
// the meter "github.com/dlock-go/dlock": dlock.acquire.duration,
// dlock.held, dlock.lost, with dlock.backend "redis" for a Mutex and
// "redlock" for a Redlock). Optional, defaults to otel.GetMeterProvider();
// nil means that default.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.tel.MeterProvider = mp }
}

// WithTracerProvider sets where the lock's spans go: one per Lock
// ("dlock.lock") and TryLock ("dlock.try_lock"), with its outcome, wait,
// token and whether it had to wait for a release. Optional, defaults to
// otel.GetTracerProvider(); nil means that default.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tel.TracerProvider = tp }
}

// WithLogger sets the logger of the lock's grants and releases (DEBUG)
// and losses (WARN). Optional, defaults to discarding; nil means that
// default.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.tel.Logger = l } }

func (o *options) driftAllowance() time.Duration {
	return time.Duration(float64(o.ttl)*o.drift) + driftFloor
}

// ValidateOptions reports whether New would accept opts, without I/O:
// errors match ErrInvalidOption and name the option.
func ValidateOptions(opts ...Option) error {
	_, err := build("-", opts, false)
	return err
}

// ValidateRedlockOptions reports whether NewRedlock would accept opts.
func ValidateRedlockOptions(opts ...Option) error {
	_, err := build("-", opts, true)
	return err
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
	if o.drift < 0 || o.drift >= MaxDriftFactor || o.drift != o.drift {
		return fmt.Errorf("%w: drift factor %v must be in [0, %v)", ErrInvalidOption, o.drift, MaxDriftFactor)
	}
	if d := o.driftAllowance(); o.ttl <= d {
		return fmt.Errorf("%w: ttl %v must be longer than the drift allowance %v", ErrInvalidOption, o.ttl, d)
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
