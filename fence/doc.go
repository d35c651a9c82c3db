// Package fence turns "nobody else holds this lock" (unknowable when a holder
// can pause) into "this token is stale" (a fact the resource can check).
//
// A lock service hands every grant a [Token]: the lock's name and a sequence
// number that grows with every new holder. The resource being protected
// remembers the highest sequence it has seen per name and rejects anything
// lower. A holder that paused, lost its lock, and woke up still believing it
// holds it, presents an old token and is turned away, however long the pause.
//
// # Guarantee
//
// A [Guard] admits a token only if its Seq is at least the highest Seq it has
// admitted for that Name. Equal tokens are admitted (one holder may write many
// times). Seq 0 means "no token" and is always rejected with [ErrNoToken], so a
// backend that cannot mint sound tokens (Redlock) cannot be fenced by mistake.
//
// # Limits
//
// Fencing protects only the writes that pass through a guard, and only if the
// guard's check and the protected write are atomic together (see the
// PostgreSQL guard in contrib/pgfence, which runs both in one transaction).
// [MemoryGuard] lives in one process; it protects a resource owned by that
// process, not a resource shared by many. Tokens from different lock services
// (or from a Redis node that lost its counter in a failover) are not
// comparable.
//
// # Caveats
//
//   - A guard admits the same token many times. Exclusion comes from the lock
//     plus the guard together: the lock makes overlap rare, the guard makes
//     overlap harmless.
//   - The high-water mark must be stored with the resource. A guard that
//     forgets (a restarted MemoryGuard) admits stale tokens again.
package fence
