// Package lossctx gives work done under a grant (a lock grant, a
// leadership term) a context that ends when the grant may have been lost:
// the one loss watcher behind lock.Do, lock.DoAll and election.Run.
package lossctx

import (
	"context"
	"sync"
)

// Grant is what lossctx watches: lock.Held and *election.Term have both.
type Grant interface {
	Done() <-chan struct{}
	Err() error
}

// With returns a copy of ctx that is cancelled when the Done channel of
// any of gs closes, with that grant's Err as the cause (fallback if Err is
// still nil). stop cancels the context and returns once every watcher
// goroutine has exited; call it once, when the work is over.
func With(ctx context.Context, fallback error, gs ...Grant) (_ context.Context, stop func()) {
	runCtx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	for _, g := range gs {
		wg.Go(func() {
			select {
			case <-g.Done():
				cause := g.Err()
				if cause == nil {
					cause = fallback
				}
				cancel(cause)
			case <-runCtx.Done():
			}
		})
	}
	return runCtx, func() {
		cancel(nil)
		wg.Wait()
	}
}
