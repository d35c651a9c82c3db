// Package pgfence is a [fence.Guard] for PostgreSQL (pgx v5): it keeps the
// highest admitted token per lock name in a table, and admits a token only if
// it is at least the stored one.
//
// # Guarantee
//
// [Guard.AdmitTx] admits a token inside the caller's own transaction: the
// check and the protected writes commit together or not at all. The admit
// statement takes the fence row's lock and keeps it until the transaction
// ends, so two writers fenced by the same name serialize, and once a token N+1
// has committed no transaction with token N can commit. On a stale token
// AdmitTx rolls the transaction back itself, so a caller that ignores the
// error cannot commit the protected writes. [Guard.Do] wraps this in a
// transaction of its own.
//
// # Limit
//
// [Guard.Admit] on its own only raises the high-water mark: a write that does
// not run in the same transaction is not protected by it (a higher token can
// be admitted between the check and the write). Only writes inside a
// transaction that called AdmitTx (or inside Do) are fenced. Tokens must come
// from one lock service: tokens of different services are not comparable.
//
// # Caveats
//
//   - The fence row stays locked until the transaction ends. A holder that
//     pauses inside an open transaction blocks the next holder's AdmitTx
//     (safety is kept, liveness is not): bound transactions with
//     idle_in_transaction_session_timeout or statement_timeout.
//   - Pass AdmitTx the transaction that does the protected writes. If it is a
//     savepoint (a pgx.Tx begun from another Tx), a stale token rolls back
//     only to the savepoint.
//   - The table must exist: run [Guard.Migrate] once, or apply [DDL] (or
//     [Guard.DDL] for a custom table) with your migration tool.
//   - Seq is stored as numeric(20,0), so every uint64 fits.
//   - The high-water mark is as durable as the database: restoring an old
//     backup forgets admitted tokens and re-admits stale ones.
package pgfence
