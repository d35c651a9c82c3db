// Package store defines what a store of package intent's journal is: its
// records, the Store interface and the refusal of a superseded holder.
// It depends on package fence alone, so that a Store in another module
// (contrib/pgfence's IntentStore) adds nothing else to its users' builds.
// Package intent names each of these (intent.Store, intent.Record,
// intent.ErrSuperseded, …); use those names.
package store

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/fence"
)

// Grant is what a Store needs of a lock grant: its token. Package intent
// passes the lock.Held it was given; a Store may look for more (the etcd
// store for IsOwner).
type Grant interface {
	Token() fence.Token
}

// Intent is an operation a holder of a lock was about to perform, as the
// journal keeps it.
type Intent struct {
	Op    string      // the operation's id, given by the caller
	Key   string      // the idempotency key, fixed when the first intent was written
	Token fence.Token // the grant that first wrote it
}

// Record is an intent and what became of it, as a Store keeps it.
type Record struct {
	Intent
	Done    bool      // an outcome is recorded
	Failure string    // the recorded failure ("" for success); meaningful when Done
	At      time.Time // when the outcome was recorded (for compaction; etcd: the client's clock); zero while open
}

// Store keeps a journal's records and its mark: per lock name, the highest
// token Seq that has written to it. Every method that takes a Grant is
// fenced: it refuses, with an error matching ErrSuperseded, when the mark is
// above h.Token().Seq, and otherwise raises the mark to it in the same
// atomic step as its write. A Store may refuse more (the etcd store also
// refuses a grant whose key is gone, with an error matching
// lock.ErrLockLost). Implementations must be safe for concurrent use.
//
// Stores are package intent's Memory and Etcd, and contrib/pgfence's
// journal on PostgreSQL; intenttest.Run is the suite every Store passes.
type Store interface {
	// Begin returns op's record for h's lock, creating it from fresh (an
	// open intent, Token h.Token()) if there is none.
	Begin(ctx context.Context, h Grant, fresh Intent) (Record, error)
	// Finish records op's outcome: failure is "" for success. op's record
	// exists (Begin returned it); if it is already done, Finish keeps the
	// first outcome.
	Finish(ctx context.Context, h Grant, op, failure string) error
	// Open returns the open records of h's lock, in the order their
	// intents were first written.
	Open(ctx context.Context, h Grant) ([]Record, error)
	// Mark returns the mark of lock name's journal: the highest Seq that
	// has written to it (0: none). It only reads.
	Mark(ctx context.Context, name string) (uint64, error)
	// Compact removes up to limit records, of any lock, whose outcome was
	// recorded before before, and returns how many it removed. It never
	// removes an open record. It is not fenced.
	Compact(ctx context.Context, before time.Time, limit int) (int, error)
}

var (
	// ErrSuperseded is returned when a later holder of the lock has written
	// to the journal: the caller's grant is over, and it must not start the
	// operation. It also matches fence.ErrStaleToken under errors.Is; the
	// refusal's *fence.StaleTokenError gives the numbers.
	ErrSuperseded error = superseded{}
)

type superseded struct{}

func (superseded) Error() string { return "intent: superseded by a later holder" }

func (superseded) Is(target error) bool { return target == fence.ErrStaleToken }

// Stale returns the error a Store returns when its mark for t.Name is
// highest, above t.Seq: it matches ErrSuperseded, fence.ErrStaleToken and
// (with errors.As) *fence.StaleTokenError, whose message it has.
func Stale(t fence.Token, highest uint64) error {
	return &staleError{&fence.StaleTokenError{Name: t.Name, Seq: t.Seq, Highest: highest}}
}

type staleError struct{ st *fence.StaleTokenError }

func (e *staleError) Error() string        { return e.st.Error() }
func (e *staleError) Is(target error) bool { return target == ErrSuperseded }
func (e *staleError) Unwrap() error        { return e.st }
