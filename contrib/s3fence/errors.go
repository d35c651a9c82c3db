package s3fence

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidArgument is returned by New for a nil client, an empty
	// bucket or a bad option value, and by Put, Token and Landed for an
	// empty key or write ID; the message names the argument.
	ErrInvalidArgument = errors.New("s3fence: invalid argument")

	// ErrUnsafeStore is returned by New and Verify when the store does not
	// honour conditional writes: it accepts a write that its condition
	// should have refused (a second create-only PUT, a PUT on a stale
	// ETag), refuses conditions altogether, writes although it answered
	// 412, keeps no user metadata, or keeps the ETag when the content
	// changes. Writes to such a store cannot be fenced.
	ErrUnsafeStore = errors.New("s3fence: store does not honour conditional writes")

	// ErrOtherLock is returned by Put when key was last written under a
	// token of another lock name: tokens of different locks are not
	// comparable, so the guard admits neither. *OtherLockError gives the
	// names.
	ErrOtherLock = errors.New("s3fence: key is fenced by another lock")

	// ErrSameContent is returned by Put when the body is the content key
	// already holds, written under another token: the object's ETag would
	// not change, so a writer that read the object before this write could
	// still pass its If-Match condition after it. Nothing is written. See
	// the package documentation.
	ErrSameContent = errors.New("s3fence: body is the object's current content under another token")

	// ErrCorruptToken is returned by Put and Token when the object's token
	// metadata is not a token's wire form (someone else wrote it). Put
	// writes nothing to such a key.
	ErrCorruptToken = errors.New("s3fence: corrupt token metadata")

	// ErrContended is returned by Put when every attempt lost a race
	// against another write of the key (412 Precondition Failed or 409
	// ConditionalRequestConflict) and the token was still current at each
	// re-read, WithMaxAttempts times in a row. Nothing was written.
	ErrContended = errors.New("s3fence: too many conflicting writes")

	// ErrOutcomeUnknown is returned by Put when its ctx ended, or its
	// attempts ran out, while a write may have reached the store: the
	// write may have landed, or may still land. *OutcomeUnknownError gives
	// the write's ID, for Landed.
	ErrOutcomeUnknown = errors.New("s3fence: outcome of the write unknown")
)

// OtherLockError describes a Put refused with ErrOtherLock.
type OtherLockError struct {
	Key    string
	Stored string // the lock name of the token key was last written under
	Name   string // the lock name of the rejected token
}

func (e *OtherLockError) Error() string {
	return fmt.Sprintf("s3fence: key %q is fenced by lock %q, not %q: tokens of different locks are not comparable", e.Key, e.Stored, e.Name)
}

// Is reports whether target is ErrOtherLock.
func (e *OtherLockError) Is(target error) bool { return target == ErrOtherLock }

// OutcomeUnknownError describes a Put whose write may or may not have
// landed. It matches ErrOutcomeUnknown and, through Unwrap, the cause (the
// ctx's error when ctx ended).
type OutcomeUnknownError struct {
	Key     string
	WriteID string // the ID in the metadata of the write, if it landed (see Guard.Landed)
	Err     error  // why the outcome is unknown
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("s3fence: put %q: outcome unknown (write ID %s): %v", e.Key, e.WriteID, e.Err)
}

// Is reports whether target is ErrOutcomeUnknown.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// Unwrap returns the cause.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }
