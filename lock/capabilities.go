package lock

// Liveness says what ends a grant whose holder stops responding.
type Liveness int

const (
	// LivenessSession: the grant lives as long as its session's heartbeats
	// reach the lock service (etcd lease); it ends a bounded time after they
	// stop, and never while they continue.
	LivenessSession Liveness = iota + 1
	// LivenessTTL: the grant lives for a fixed validity unless extended by
	// the holder (Redis, Redlock).
	LivenessTTL
)

func (l Liveness) String() string {
	switch l {
	case LivenessSession:
		return "session"
	case LivenessTTL:
		return "ttl"
	}
	return "unknown"
}

// Capabilities says what a Locker guarantees. Read it (Locker.Capabilities)
// before relying on a property: for example, only fence a resource with a
// Locker whose FencingTokens is true.
type Capabilities struct {
	// Exclusive: at most one grant at a time (false for a semaphore's
	// permits).
	Exclusive bool
	// FencingTokens: every grant carries a Token whose Seq is strictly
	// greater than every earlier grant's of the same lock.
	FencingTokens bool
	// FIFO: waiters are granted in order of arrival.
	FIFO bool
	// Liveness: what ends the grant of an unresponsive holder.
	Liveness Liveness
	// SurvivesFailover: exclusion and token monotonicity survive the loss of
	// any minority of the lock service's nodes.
	SurvivesFailover bool
}
