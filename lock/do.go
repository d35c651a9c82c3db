package lock

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/internal/cleanup"
	"github.com/dlock-go/dlock/internal/lossctx"
)

// Do acquires l, runs fn under a context that is cancelled, with a cause
// matching ErrLockLost, as soon as the grant's Done closes, and releases the
// lock when fn returns or panics (even if ctx was cancelled meanwhile: the
// Unlock runs under a context detached from ctx, bounded by a few
// seconds). A panic in fn is re-raised after the Unlock.
//
// fn must stop acting on the protected resource when its context ends, and
// should pass the grant's Token to the resource so that a late write is
// rejected there. Do returns fn's error, or the acquire error, or the unlock
// error if fn succeeded; if the lock was lost while fn ran, the returned error
// also matches ErrLockLost.
func Do(ctx context.Context, l Locker, fn func(ctx context.Context, h Held) error) error {
	h, err := l.Lock(ctx)
	if err != nil {
		return err
	}
	return holding(ctx, []Held{h}, func(ctx context.Context) error { return fn(ctx, h) })
}

// holding runs fn under a context cancelled when any of hs may be lost,
// then unlocks every one of hs, also when fn panics (the panic goes on
// after the unlocks). It returns fn's error, joined with a loss the
// unlocks report, or else the unlocks' error.
func holding(ctx context.Context, hs []Held, fn func(ctx context.Context) error) (err error) {
	runCtx, stop := lossctx.With(ctx, ErrLockLost, heldGrants(hs)...)
	var fnErr error
	defer func() {
		stop()
		uctx, cancel := cleanup.Context(ctx)
		defer cancel()
		var lost, failed []error
		for _, h := range hs {
			switch uerr := h.Unlock(uctx); {
			case errors.Is(uerr, ErrLockLost):
				lost = append(lost, uerr)
			case uerr != nil:
				failed = append(failed, uerr)
			}
		}
		unlockErr := errors.Join(append(lost, failed...)...)
		switch {
		case fnErr != nil && len(lost) > 0 && !errors.Is(fnErr, ErrLockLost):
			err = fmt.Errorf("%w (and the lock was lost while it ran: %w)", fnErr, errors.Join(lost...))
		case fnErr != nil:
			err = fnErr
		default:
			err = unlockErr
		}
	}()
	fnErr = fn(runCtx)
	return nil // set by the deferred function
}

func heldGrants(hs []Held) []lossctx.Grant {
	gs := make([]lossctx.Grant, len(hs))
	for i, h := range hs {
		gs[i] = h
	}
	return gs
}
