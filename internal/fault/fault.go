package fault

// The environment variables read, with the tag, at start-up.
const (
	// RateEnv sets the rate of the seam's clock: a positive float, 1 (real
	// time) when unset or empty.
	RateEnv = "DLOCK_CLOCK_RATE"
	// PlantEnv lists the plants, comma-separated.
	PlantEnv = "DLOCK_PLANT"
)

// The plants: known bugs, each enabled (with the tag) when PlantEnv names
// it.
const (
	// LateDone makes a session's local deadline sent + TTL + TTL/2, where
	// sent is the send time of the last acknowledged keepalive, instead of
	// sent + TTL − margin: Done closes after the server may have expired
	// the lease and granted its locks to others.
	LateDone = "late-done"
	// SkipCheck makes every waiter of an etcd queue (a Mutex's, an RWMutex
	// writer's or reader's, a Semaphore's, a candidate's) take itself for
	// granted at once, without waiting for the entries before it: two
	// grants of one lock at once.
	SkipCheck = "skip-check"
	// UnguardedRelease makes the release of an etcd queue's entry (Unlock,
	// Resign) take itself for the holder without checking: it deletes the
	// queue's first entry, whatever it is, instead of its own key guarded
	// by its create revision. A timely release of a Mutex deletes its own
	// key as before; a late one (its key already gone with its lease)
	// deletes its successor's, whose holder goes on acting while the next
	// waiter is granted.
	UnguardedRelease = "unguarded-release"
	// TryOvergrant makes a semaphore's TryAcquire count one permit too
	// many: an acquire that finds exactly its permits held takes itself
	// for granted instead of failing with ErrLocked. The blocking Acquire
	// is unchanged.
	TryOvergrant = "try-overgrant"
	// UnfencedIntent makes package intent's journal write without its
	// fence: Do starts an operation after its grant's Done closed, and the
	// stores write intents and outcomes without comparing the mark (and,
	// on etcd, the grant's ownership): a stale holder starts a new
	// operation.
	UnfencedIntent = "unfenced-intent"
)

// Plants lists every plant.
var Plants = []string{LateDone, SkipCheck, UnguardedRelease, TryOvergrant, UnfencedIntent}
