// Package pgfence is a [fence.Guard] for PostgreSQL (pgx v5): it keeps the
// highest admitted token per lock name in a table, and admits a token only if
// it is at least the stored one. [IntentStore] is package intent's journal
// on PostgreSQL, fenced by the same marks (see Intent journal).
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
// # Intent journal
//
// [IntentStore] is an [intent.Store]: run calls to resources that cannot
// check a token (a payment API, an e-mail relay) through intent.New(store).Do.
// It stores one row per lock name and operation in a table beside the
// fences table, "<table>_intents" ([IntentDDL]): the operation's id (bytea,
// its exact bytes), its idempotency key, the Seq of the token that first
// wrote it, whether its outcome is recorded, the recorded failure, when the
// outcome was recorded (the database's clock, now()), and an identity
// column that orders the intents as they were written.
//
// The journal has no mark of its own: it admits tokens with the Guard's
// admit statement on the fences table. There is one mark per lock name, so
// a token the Guard admitted supersedes every lower token at the journal,
// and a token that wrote to the journal (or called Pending) supersedes
// every lower token at the Guard. A holder that fences its database writes
// with the Guard and its outside calls with the journal is refused at both
// once a later holder has done either. Give NewIntentStore the Guard's
// WithTable.
//
// Each step is one transaction: Begin, Finish and Open send their
// statements in one batch (one round trip), which PostgreSQL runs as one
// implicit transaction, at READ COMMITTED (SET TRANSACTION ISOLATION LEVEL
// READ COMMITTED opens the batch). Then comes the Guard's admit statement:
//
//	INSERT INTO dlock_fences AS f (name, seq) VALUES ($1, $2)
//	ON CONFLICT (name) DO UPDATE SET seq = GREATEST(f.seq, EXCLUDED.seq), …
//	RETURNING seq
//
// The second writes or reads only if the mark is now $2 (admitted):
//
//	-- Begin: insert the intent unless op has a record; return op's record
//	INSERT INTO dlock_fences_intents (name, op, key, seq) SELECT $1, $3, $4, $5
//	WHERE <admitted> ON CONFLICT (name, op) DO NOTHING …
//	-- Finish: record the first outcome
//	UPDATE dlock_fences_intents SET done = true, failure = $4, at = now()
//	WHERE name = $1 AND op = $3 AND NOT done AND <admitted>
//	-- Open: the open intents, oldest first
//	SELECT op, key, seq FROM dlock_fences_intents
//	WHERE name = $1 AND NOT done AND <admitted> ORDER BY ord
//
// The admit statement locks the fence row until the transaction ends, so
// the steps of one lock name, and the Guard's transactions on it,
// serialize; a step returns after its commit, so an intent is durable
// before Do calls the resource. A higher mark refuses the step, which then
// writes nothing, with an error matching intent.ErrSuperseded and
// fence.ErrStaleToken. Compact is one DELETE of finished rows, not fenced.
//
// Cost: a Do is two of these transactions (the intent, then the outcome):
// two round trips and two commits, each waiting for a WAL flush under the
// default synchronous_commit; Pending is one. BenchmarkJournalDo measures a
// Do against a bare HTTP call, on a server with the default durability
// settings.
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
//     backup forgets admitted tokens and re-admits stale ones, and the
//     journal's intents with them.
//   - The journal's steps run at READ COMMITTED whatever the database's
//     default_transaction_isolation: each batch opens with SET TRANSACTION.
//   - Retention compares the database's clock (the outcome's time) with
//     the caller's (intent.Journal computes the cutoff): skew between them
//     shifts it. A recorded failure is text: invalid UTF-8 and NUL bytes in
//     it become U+FFFD.
//   - The journal commits each step itself, on a pool: it cannot run inside
//     a caller's transaction. Run IntentStore.Migrate (or apply its DDL)
//     before use; it creates the fences table too if it is missing.
package pgfence
