// Package cleanup bounds the work dlock does after the caller's context
// may have ended: removing a cancelled acquire's key, Do's Unlock, Run's
// Resign, a failed Redis acquire's delete.
package cleanup

import (
	"context"
	"time"
)

// Timeout bounds every cleanup. It is long enough for a loaded cluster to
// answer and short enough that a partition does not hold a caller for
// long; a cleanup that times out leaves the key to its lease (etcd) or its
// TTL (Redis).
const Timeout = 5 * time.Second

// Context returns a context that keeps ctx's values but not its
// cancellation, bounded by Timeout.
func Context(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), Timeout)
}
