package intent

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/intent/idempotency"
	"github.com/dlock-go/dlock/intent/store"
)

// The journal's records and its Store, defined in package intent/store
// (which depends on package fence alone, for Stores in other modules).
type (
	// Intent is an operation a holder of a lock was about to perform, as
	// the journal keeps it: Op, Key and Token (the grant that first wrote
	// it).
	Intent = store.Intent
	// Record is an intent and what became of it, as a Store keeps it.
	Record = store.Record
	// Store keeps a journal's records and its mark, fenced by the token;
	// see store.Store.
	Store = store.Store
	// Grant is what a Store needs of a lock grant (its token); a lock.Held
	// is one.
	Grant = store.Grant
)

// MaxOpLen is the longest operation id, in bytes.
const MaxOpLen = 1024

var (
	// ErrSuperseded is returned when a later holder of the lock has written
	// to the journal: the caller's grant is over, and it must not start the
	// operation. It also matches fence.ErrStaleToken under errors.Is; the
	// refusal's *fence.StaleTokenError gives the numbers.
	ErrSuperseded error = store.ErrSuperseded

	// ErrFailed is matched by the error Do returns for an operation whose
	// recorded outcome is a failure (see Failed).
	ErrFailed = errors.New("intent: operation failed")

	// ErrInvalidOp is returned for an empty operation id or one longer
	// than MaxOpLen.
	ErrInvalidOp = errors.New("intent: invalid operation id")
)

// Stale returns the error a Store returns when its mark for t.Name is
// highest, above t.Seq: it matches ErrSuperseded, fence.ErrStaleToken and
// (with errors.As) *fence.StaleTokenError, whose message it has.
func Stale(t fence.Token, highest uint64) error { return store.Stale(t, highest) }

// FailedError is a failure recorded as an operation's outcome. It matches
// ErrFailed, and the error it was recorded from while that is at hand
// (in the Do that recorded it).
type FailedError struct {
	Op  string
	Msg string // the recorded failure
	err error  // the original, in the Do that recorded it
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("intent: operation %q failed: %s", e.Op, e.Msg)
}

func (e *FailedError) Is(target error) bool { return target == ErrFailed }

func (e *FailedError) Unwrap() error { return e.err }

// Failed marks err as the operation's final outcome: when fn returns
// Failed(err), Do records the failure, and a later Do of the same operation
// returns it (matching ErrFailed) without calling fn. Any other error from
// fn leaves the intent open: the call may or may not have taken effect, and
// the next attempt (this holder's, or a later holder's through Pending) runs
// it again with the same key.
func Failed(err error) error {
	if err == nil {
		return nil
	}
	return &finalError{err}
}

type finalError struct{ err error }

func (e *finalError) Error() string { return e.err.Error() }
func (e *finalError) Unwrap() error { return e.err }

// Key derives an operation's idempotency key from the lock name, the
// operation id and the Seq of the token that first wrote its intent:
// "<op>.<seq>.<hash>", where <op> is at most 64 bytes of the id with every
// byte outside [A-Za-z0-9-_~] written "-", and <hash> is 22 characters of
// URL-safe base64 of SHA-256 over name and op. The key is printable ASCII
// without spaces, at most 108 bytes: safe as an HTTP header value, in gRPC
// metadata, and within the 255 bytes payment APIs accept.
func Key(name, op string, seq uint64) string {
	var b strings.Builder
	for i := 0; i < len(op) && b.Len() < 64; i++ {
		c := op[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '~' {
			b.WriteByte(c)
		} else {
			b.WriteByte('-')
		}
	}
	sum := sha256.Sum256([]byte(name + "\x00" + op))
	b.WriteByte('.')
	b.WriteString(strconv.FormatUint(seq, 10))
	b.WriteByte('.')
	b.WriteString(base64.RawURLEncoding.EncodeToString(sum[:])[:22])
	return b.String()
}

func checkOp(op string) error {
	if op == "" || len(op) > MaxOpLen {
		return fmt.Errorf("%w: %d bytes (want 1 to %d)", ErrInvalidOp, len(op), MaxOpLen)
	}
	return nil
}

// NewContext returns a copy of ctx that carries an idempotency key. Do
// passes fn a ctx made with it, so that client helpers (contrib/httpfence's
// Transport sends it as the Idempotency-Key header, contrib/grpcfence's
// interceptors as metadata) carry the key without the caller's help. It is
// idempotency.NewContext, in a package without dependencies for such
// helpers.
func NewContext(ctx context.Context, key string) context.Context {
	return idempotency.NewContext(ctx, key)
}

// KeyFromContext returns the key stored in ctx by NewContext, if any.
func KeyFromContext(ctx context.Context) (string, bool) { return idempotency.FromContext(ctx) }
