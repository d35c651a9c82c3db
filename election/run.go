package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/internal/cleanup"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/lossctx"
	"github.com/dlock-go/dlock/internal/option"
	"github.com/dlock-go/dlock/internal/queue"
	"github.com/dlock-go/dlock/session"
)

// DefaultRetryPeriod is the wait between campaigns in Run when
// Config.RetryPeriod is zero.
const DefaultRetryPeriod = time.Second

// Config configures Run, in the spirit of client-go's LeaderElectionConfig.
// Validate checks it; Run calls Validate first. Run copies the Config: it
// may be reused, but not changed while Run reads it at the start.
type Config struct {
	// Client is the etcd client Run creates its sessions on. Required.
	Client *clientv3.Client

	// Name is the election's name; it must pass lock.ValidateName.
	// Required.
	Name string

	// Value is this candidate's identity, the value observers see while it
	// leads. Required (non-empty).
	Value string

	// SessionOptions configure each session Run creates (for example
	// session.WithTTL). Optional; nil means session defaults. Invalid ones
	// make Run return the session's ErrInvalidOption at once.
	SessionOptions []session.Option

	// Options configure the election (for example WithPrefix). Optional.
	Options []Option

	// OnElected is called, from Run's goroutine, each time this candidate
	// is elected. Its ctx is cancelled at step-down, the moment Term.Done
	// closes, with Term.Err as the cause (matching ErrLeadershipLost, or
	// ErrResigned if OnElected resigned), or when Run's ctx ends. It must
	// return promptly after that. If it returns while still leading (or
	// after resigning itself), Run resigns and returns its error.
	// Required.
	OnElected func(ctx context.Context, t *Term) error

	// OnStoppedLeading is called, from Run's goroutine, after every
	// OnElected call returns (even if it panics), once the term has been
	// resigned (or was lost) and before the term's session is closed; and,
	// as in client-go, once when Run returns without this candidate ever
	// having been elected. So it is always called at least once, and never
	// while OnElected runs. Optional; nil means no call.
	OnStoppedLeading func()

	// OnNewLeader is called with every state Observe reports: every new
	// leader (including this candidate), every value change, and the zero
	// Leader when there is none. It is called from one goroutine of Run's,
	// in order, never concurrently with itself, but concurrently with
	// OnElected; Run waits for it to return before it returns. Optional;
	// nil means no observing.
	OnNewLeader func(Leader)

	// Recampaign makes Run campaign again, on a fresh session, after
	// leadership was lost or a campaign failed (session expiry, etcd
	// errors), after RetryPeriod. Optional; false means Run returns after
	// the first term or failure.
	Recampaign bool

	// RetryPeriod is the wait before each new campaign when Recampaign is
	// set. Optional, defaults to DefaultRetryPeriod; must not be negative.
	RetryPeriod time.Duration
}

func (c *Config) validate() (options, error) {
	if c.Client == nil {
		return options{}, fmt.Errorf("%w: Config.Client is nil", ErrInvalidOption)
	}
	o := defaults()
	if err := sentinels.Check(c.Name, &o.Options, func() error { return option.Apply(&o, c.Options) }); err != nil {
		return options{}, err
	}
	if c.Value == "" {
		return options{}, fmt.Errorf("%w: Config.Value is empty", ErrInvalidOption)
	}
	if c.OnElected == nil {
		return options{}, fmt.Errorf("%w: Config.OnElected is nil", ErrInvalidOption)
	}
	if c.RetryPeriod < 0 {
		return options{}, fmt.Errorf("%w: Config.RetryPeriod %v is negative", ErrInvalidOption, c.RetryPeriod)
	}
	for i, o := range c.SessionOptions {
		if o == nil {
			return options{}, fmt.Errorf("%w: Config.SessionOptions[%d] is nil", ErrInvalidOption, i)
		}
	}
	return o, nil
}

// Run campaigns in the election cfg describes, on a session of its own,
// and calls cfg.OnElected when elected, under a context cancelled at
// step-down. After the term it resigns (if still leading), calls
// OnStoppedLeading and closes the session; with cfg.Recampaign it then
// campaigns again on a fresh session.
//
// Run returns when ctx ends (with an error matching ctx.Err()), when
// OnElected returns while still leading (with OnElected's error), or,
// without Recampaign, when the term is lost (an error matching
// ErrLeadershipLost) or a campaign fails. It returns an invalid Config's
// error at once. Every goroutine it starts has ended when it returns.
func Run(ctx context.Context, cfg Config) error {
	o, err := cfg.validate()
	if err != nil {
		return err
	}
	r := runner{cfg: cfg, opts: o}
	if cfg.RetryPeriod == 0 {
		r.cfg.RetryPeriod = DefaultRetryPeriod
	}
	if cfg.OnNewLeader != nil {
		octx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		ob := observer{cli: cfg.Client, prefix: queue.PrefixFor(o.Prefix, cfg.Name), hook: o.readHook}
		ch := make(chan Leader)
		go ob.run(octx, ch)
		go func() {
			defer close(done)
			for l := range ch {
				cfg.OnNewLeader(l)
			}
		}()
		defer func() { cancel(); <-done }()
	}
	defer func() {
		if !r.elected && cfg.OnStoppedLeading != nil {
			cfg.OnStoppedLeading()
		}
	}()
	for {
		again, err := r.once(ctx)
		if !again || !r.cfg.Recampaign {
			return err
		}
		retry := time.NewTimer(r.cfg.RetryPeriod)
		select {
		case <-ctx.Done():
			retry.Stop()
			return r.ctxErr(ctx)
		case <-retry.C:
		}
	}
}

type runner struct {
	cfg     Config
	opts    options
	elected bool // OnElected ran at least once
}

func (r *runner) ctxErr(ctx context.Context) error {
	return errs.New("election", r.cfg.Name, "run", ctx.Err())
}

// once runs one session: campaign, lead, step down. again reports whether
// campaigning again makes sense.
func (r *runner) once(ctx context.Context) (again bool, err error) {
	sess, err := session.New(ctx, r.cfg.Client, r.cfg.SessionOptions...)
	switch {
	case ctx.Err() != nil:
		return false, r.ctxErr(ctx)
	case errors.Is(err, session.ErrInvalidOption):
		return false, err
	case err != nil:
		return true, errs.New("election", r.cfg.Name, "run", err)
	}
	defer func() {
		cctx, cancel := cleanup.Context(ctx)
		defer cancel()
		_ = sess.Close(cctx) // the lease expires anyway if the revoke fails
	}()
	el, err := newElection(sess, r.cfg.Name, &r.opts, nil)
	if err != nil {
		return false, errs.New("election", r.cfg.Name, "run", err)
	}
	term, err := el.Campaign(ctx, r.cfg.Value)
	switch {
	case ctx.Err() != nil:
		return false, r.ctxErr(ctx)
	case err != nil:
		return true, errs.New("election", r.cfg.Name, "run", err)
	}
	return r.lead(ctx, term)
}

// lead runs OnElected for term and steps down after it.
func (r *runner) lead(ctx context.Context, term *Term) (again bool, err error) {
	leadCtx, stop := lossctx.With(ctx, ErrLeadershipLost, term)
	defer func() { // also when OnElected panics: the panic goes on after it
		stop()
		if term.Err() == nil {
			rctx, rcancel := cleanup.Context(ctx)
			_ = term.Resign(rctx) // on failure the session's Close revokes the lease
			rcancel()
		}
		if r.cfg.OnStoppedLeading != nil {
			r.cfg.OnStoppedLeading()
		}
	}()
	r.elected = true
	fnErr := r.cfg.OnElected(leadCtx, term)
	lost := term.Err()
	switch {
	case ctx.Err() != nil:
		return false, r.ctxErr(ctx)
	case lost != nil && !errors.Is(lost, ErrResigned):
		return true, errs.New("election", r.cfg.Name, "run", lost)
	default:
		return false, fnErr
	}
}
