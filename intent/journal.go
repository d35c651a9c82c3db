package intent

import (
	"context"
	"errors"
	"fmt"
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
	compacted map[string]time.Time // lock name → last compaction
}

// New returns a Journal on store, keeping finished intents for
// DefaultRetention.
func New(store Store) *Journal {
	return &Journal{store: store, retention: DefaultRetention, compacted: map[string]time.Time{}}
}

// WithRetention returns a Journal on the same store that keeps finished
// intents for d (at least a minute; shorter is raised to a minute). Open
// intents are never removed. Finished ones are removed by the Journal
// itself, a batch at a time, after it records an outcome.
func (j *Journal) WithRetention(d time.Duration) *Journal {
	n := New(j.store)
	n.retention = max(d, time.Minute)
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
//     call fn. If that happens after fn ran, Do returns such an error too
//     (the outcome is not recorded: the later holder finds the intent in
//     Pending and runs it again, with the same key).
//   - If h's grant has ended (Done is closed), Do does not call fn and
//     returns h.Err().
//
// fn's error leaves the intent open (the call may have taken effect), and
// Do returns it; fn returns Failed(err) to record a final failure instead.
// Concurrent calls of Do with one op under one grant may each call fn, with
// the same key.
func (j *Journal) Do(ctx context.Context, h lock.Held, op string, fn func(ctx context.Context, key string) error) error {
	if fn == nil {
		return errors.New("intent: Do: nil fn")
	}
	if err := j.check(ctx, h, op); err != nil {
		return err
	}
	t := h.Token()
	rec, err := j.store.Begin(ctx, h, Intent{Op: op, Key: Key(t.Name, op, t.Seq), Token: t})
	if err != nil {
		return fmt.Errorf("intent: %q: write the intent: %w", op, err)
	}
	if rec.Done {
		if rec.Failure != "" {
			return &FailedError{Op: op, Msg: rec.Failure}
		}
		return nil
	}
	if err := ended(h); err != nil {
		return fmt.Errorf("intent: %q: not started, the grant ended: %w", op, err)
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
		return fmt.Errorf("intent: %q ran, but its outcome is not recorded: %w", op, err)
	}
	j.compact(ctx, t.Name)
	if failure != "" {
		return &FailedError{Op: op, Msg: failure, err: final.err}
	}
	return nil
}

// Pending raises the journal's mark to h's token, so that no earlier holder
// of h's lock can start anything from now on, then returns the intents that
// earlier holders left open, oldest first. Each may or may not have taken
// effect at its resource. Finish one with Do and its Op: fn gets its Key,
// and the resource's deduplication makes the two calls one. Where the
// resource does not deduplicate, look the operation up first (by Op or Key)
// and skip the call if it happened; Do still records the outcome.
func (j *Journal) Pending(ctx context.Context, h lock.Held) ([]Intent, error) {
	if err := j.check(ctx, h, "pending"); err != nil {
		return nil, err
	}
	recs, err := j.store.Open(ctx, h)
	if err != nil {
		return nil, fmt.Errorf("intent: read the open intents: %w", err)
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

// Compact removes the finished intents of lock name older than the
// retention, up to 1,000 of them, and returns how many it removed. Do
// calls it now and then; call it to compact a lock nobody writes to any
// more.
func (j *Journal) Compact(ctx context.Context, name string) (int, error) {
	return j.store.Compact(ctx, name, time.Now().Add(-j.retention), 1000)
}

// compact runs Compact for name at most once per 1/16 of the retention.
// A failure is ignored: the next one retries.
func (j *Journal) compact(ctx context.Context, name string) {
	now := time.Now()
	j.mu.Lock()
	if now.Sub(j.compacted[name]) < j.retention/16 {
		j.mu.Unlock()
		return
	}
	j.compacted[name] = now
	j.mu.Unlock()
	_, _ = j.store.Compact(ctx, name, now.Add(-j.retention), 100)
}

func (j *Journal) check(ctx context.Context, h lock.Held, op string) error {
	if h == nil {
		return errors.New("intent: nil lock.Held")
	}
	if err := checkOp(op); err != nil {
		return err
	}
	if err := h.Token().Check(); err != nil {
		return fmt.Errorf("intent: %q: the grant has no usable token: %w", op, err)
	}
	if err := ended(h); err != nil {
		return fmt.Errorf("intent: %q: not started, the grant ended: %w", op, err)
	}
	return ctx.Err()
}

// ended returns h.Err() once h's Done is closed.
func ended(h lock.Held) error {
	if fault.Planted(fault.UnfencedIntent) {
		return nil
	}
	select {
	case <-h.Done():
		if err := h.Err(); err != nil {
			return err
		}
		return lock.ErrLockLost
	default:
		return nil
	}
}
