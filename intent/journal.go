package intent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/fault"
	"github.com/dlock-go/dlock/lock"
)

// DefaultRetention is how long a Journal keeps a finished intent: as long
// as Stripe keeps an idempotency key. While it is kept, a Do of the same
// operation returns its outcome without calling fn.
const DefaultRetention = 24 * time.Hour

// finishGrace bounds the recording of an outcome after Do's ctx ended.
const finishGrace = 5 * time.Second

// Journal records intents in a Store and runs operations through them. A
// Journal is safe for concurrent use and runs no goroutine.
type Journal struct {
	store     Store
	retention time.Duration

	mu        sync.Mutex
	compacted time.Time // the last compaction
}

// New returns a Journal on store, keeping finished intents for
// DefaultRetention.
func New(store Store) *Journal {
	return &Journal{store: store, retention: DefaultRetention}
}

// WithRetention returns a Journal on the same store that keeps finished
// intents for d, which must be positive (it panics otherwise: a journal
// that forgets outcomes at once would run operations again). Keep them at
// least as long as the resources keep idempotency keys. Open intents are
// never removed. Finished ones are removed by the Journal itself, a batch
// at a time, after it records an outcome (at most every d/16), or by
// Compact.
func (j *Journal) WithRetention(d time.Duration) *Journal {
	if d <= 0 {
		panic(fmt.Sprintf("intent: WithRetention(%v): the retention must be positive", d))
	}
	n := New(j.store)
	n.retention = d
	return n
}

// Do runs op at most once per journal, as far as the resource's own
// deduplication allows: it writes op's intent (fenced by h's token), calls
// fn with the intent's idempotency key, then records the outcome (fenced
// too). fn must pass key to the resource (an Idempotency-Key header, a
// payment SDK's idempotency parameter); its ctx also carries the key
// (KeyFromContext), for contrib/httpfence's and grpcfence's clients.
//
//   - If op has an open intent (an earlier attempt, by this holder or an
//     earlier one, that did not record an outcome), Do reuses its key.
//   - If op's outcome is recorded, Do returns it without calling fn: nil,
//     or an error matching ErrFailed.
//   - If a later holder of h's lock has written to the journal, Do returns
//     an error matching ErrSuperseded and fence.ErrStaleToken and does not
//     call fn, whether or not h's Done has closed. If that happens after fn
//     ran, Do returns such an error too (the outcome is not recorded: the
//     later holder finds the intent in Pending and runs it again, with the
//     same key).
//   - If h's grant has ended (Done is closed, or, on etcd, its key is
//     gone), Do does not call fn and returns an error matching h.Err()
//     (lock.ErrLockLost).
//
// A caller stops on either refusal: its grant is over.
//
// fn's error leaves the intent open (the call may have taken effect), and
// Do returns it; fn returns Failed(err) to record a final failure instead.
// Concurrent calls of Do with one op under one grant may each call fn, with
// the same key.
func (j *Journal) Do(ctx context.Context, h lock.Held, op string, fn func(ctx context.Context, key string) error) error {
	if fn == nil {
		return errors.New("intent: Do: nil fn")
	}
	if err := checkOp(op); err != nil {
		return err
	}
	what := strconv.Quote(op)
	if err := j.check(ctx, h, what); err != nil {
		return err
	}
	t := h.Token()
	rec, err := j.store.Begin(ctx, h, Intent{Op: op, Key: Key(t.Name, op, t.Seq), Token: t})
	if err != nil {
		return refusal(what, "write the intent", err)
	}
	if rec.Done {
		if rec.Failure != "" {
			return &FailedError{Op: op, Msg: rec.Failure}
		}
		return nil
	}
	if err := j.ended(ctx, h, what); err != nil {
		return err
	}
	ferr := fn(NewContext(ctx, rec.Key), rec.Key)
	var final *finalError
	failure := ""
	switch {
	case ferr == nil:
	case errors.As(ferr, &final):
		failure = final.err.Error()
		if failure == "" {
			failure = "failed"
		}
	default:
		return ferr
	}
	fctx := ctx
	if ctx.Err() != nil {
		// fn ran: try to record its outcome even though ctx ended, for a
		// bounded time.
		var cancel context.CancelFunc
		fctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), finishGrace)
		defer cancel()
	}
	if err := j.store.Finish(fctx, h, op, failure); err != nil {
		if errors.Is(err, ErrSuperseded) {
			err = fmt.Errorf("intent: %s ran, but a later holder superseded this one before its outcome was recorded (that holder finishes it): %w", what, err)
		} else {
			err = fmt.Errorf("intent: %s ran, but its outcome is not recorded (the next attempt finishes it): %w", what, err)
		}
		if final != nil {
			err = errors.Join(err, final.err)
		}
		return err
	}
	j.compact(ctx)
	if failure != "" {
		return &FailedError{Op: op, Msg: failure, err: final.err}
	}
	return nil
}

// refusal words a Store's error for what (an op, or Pending) at step.
func refusal(what, step string, err error) error {
	if errors.Is(err, ErrSuperseded) {
		return fmt.Errorf("intent: %s: superseded by a later holder, not started: %w", what, err)
	}
	return fmt.Errorf("intent: %s: %s: %w", what, step, err)
}

// Pending raises the journal's mark to h's token, so that no earlier holder
// of h's lock can start anything from now on, then returns the intents that
// earlier holders left open, oldest first. Each may or may not have taken
// effect at its resource. Finish one with Do and its Op: fn gets its Key,
// and the resource's deduplication makes the two calls one. Where the
// resource does not deduplicate, look the operation up first (by Op or Key)
// and skip the call if it happened; Do still records the outcome. Pending
// refuses a superseded or ended grant as Do does.
func (j *Journal) Pending(ctx context.Context, h lock.Held) ([]Intent, error) {
	if err := j.check(ctx, h, "Pending"); err != nil {
		return nil, err
	}
	recs, err := j.store.Open(ctx, h)
	if err != nil {
		return nil, refusal("Pending", "read the open intents", err)
	}
	seq := h.Token().Seq
	out := make([]Intent, 0, len(recs))
	for _, r := range recs {
		if r.Token.Seq < seq {
			out = append(out, r.Intent)
		}
	}
	return out, nil
}

// Compact removes up to 1,000 finished intents (of every lock) older than
// the retention, and returns how many it removed. Do calls it now and then
// (at most every retention/16); call it where the journal is written too
// rarely for that.
func (j *Journal) Compact(ctx context.Context) (int, error) {
	return j.store.Compact(ctx, time.Now().Add(-j.retention), 1000)
}

// compact removes a batch of old finished intents, at most once per 1/16
// of the retention. A failure is ignored: the next one retries.
func (j *Journal) compact(ctx context.Context) {
	now := time.Now()
	j.mu.Lock()
	if now.Sub(j.compacted) < j.retention/16 {
		j.mu.Unlock()
		return
	}
	j.compacted = now
	j.mu.Unlock()
	_, _ = j.store.Compact(ctx, now.Add(-j.retention), 100)
}

// check refuses a nil or tokenless grant, an ended grant and an ended
// ctx; what names the call in errors.
func (j *Journal) check(ctx context.Context, h lock.Held, what string) error {
	if h == nil {
		return fmt.Errorf("intent: %s: nil lock.Held", what)
	}
	if err := h.Token().Check(); err != nil {
		return fmt.Errorf("intent: %s: the grant has no usable token: %w", what, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("intent: %s: %w", what, err)
	}
	return j.ended(ctx, h, what)
}

// ended refuses h once its Done is closed, with an error matching h.Err()
// and also, if a later holder has written to the journal, ErrSuperseded.
func (j *Journal) ended(ctx context.Context, h lock.Held, what string) error {
	if fault.Planted(fault.UnfencedIntent) {
		return nil
	}
	select {
	case <-h.Done():
	default:
		return nil
	}
	cause := h.Err()
	if cause == nil {
		cause = lock.ErrLockLost
	}
	t := h.Token()
	if mark, err := j.store.Mark(ctx, t.Name); err == nil && mark > t.Seq {
		return fmt.Errorf("intent: %s: superseded by a later holder, not started: %w (and the grant ended: %w)", what, Stale(t, mark), cause)
	}
	return fmt.Errorf("intent: %s: not started, the grant ended: %w", what, cause)
}
