package lock

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/internal/cleanup"
)

// Do acquires l, runs fn under a context that is cancelled, with a cause
// matching ErrLockLost, as soon as the grant's Done closes, and releases the
// lock when fn returns (even if ctx was cancelled meanwhile: the Unlock
// runs under a context detached from ctx, bounded by a few seconds).
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
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		select {
		case <-h.Done():
			cancel(lostCause(h))
		case <-runCtx.Done():
		}
	}()
	fnErr := fn(runCtx, h)
	cancel(nil)
	<-watchDone

	uctx, ucancel := cleanup.Context(ctx)
	defer ucancel()
	unlockErr := h.Unlock(uctx)
	switch {
	case fnErr != nil && errors.Is(unlockErr, ErrLockLost) && !errors.Is(fnErr, ErrLockLost):
		return fmt.Errorf("%w (and the lock was lost while it ran: %w)", fnErr, unlockErr)
	case fnErr != nil:
		return fnErr
	default:
		return unlockErr
	}
}

func lostCause(h Held) error {
	if err := h.Err(); err != nil {
		return err
	}
	return ErrLockLost
}
