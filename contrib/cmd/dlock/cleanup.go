package main

import (
	"context"
	"time"
)

// cleanupTimeout bounds the work done after the caller's ctx may have ended
// (an Unlock, a Resign, a session's Close): long enough for a loaded cluster
// to answer, short enough that a partition does not hold dlock for long.
const cleanupTimeout = 5 * time.Second

// cleanupContext returns a context that keeps ctx's values but not its
// cancellation, bounded by cleanupTimeout.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}
