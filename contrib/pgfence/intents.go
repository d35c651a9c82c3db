package pgfence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/intent/store"
)

// IntentsSuffix is appended to the fences table's name to name the intents
// table beside it: "dlock_fences_intents" by default, "ops.fences_intents"
// for WithTable("ops.fences").
const IntentsSuffix = "_intents"

// maxTableForIntents is the longest fences table name (its last part) that
// leaves room for IntentsSuffix and the index's "_ord" within PostgreSQL's
// 63 bytes (a longer name would be truncated, onto another table's).
const maxTableForIntents = 63 - len(IntentsSuffix) - len("_ord")

// IntentDDL creates the intents table beside the default fences table
// (DefaultTable), and its index. Apply it after DDL with your migration
// tool, or call IntentStore.Migrate; IntentStore.DDL gives both for a table
// set with WithTable.
const IntentDDL = `CREATE TABLE IF NOT EXISTS "dlock_fences_intents" (
	name    text           NOT NULL,
	op      bytea          NOT NULL,
	key     text           NOT NULL,
	seq     numeric(20, 0) NOT NULL CHECK (seq > 0),
	done    boolean        NOT NULL DEFAULT false,
	failure text           NOT NULL DEFAULT '',
	at      timestamptz,
	ord     bigint         GENERATED ALWAYS AS IDENTITY,
	PRIMARY KEY (name, op)
);
CREATE INDEX IF NOT EXISTS "dlock_fences_intents_ord" ON "dlock_fences_intents" (name, done, ord);
CREATE INDEX IF NOT EXISTS "dlock_fences_intents_at" ON "dlock_fences_intents" (at) WHERE done`

// intentDDLFormat: %[1]s is the intents table, %[2]s and %[3]s its
// indexes' names.
const intentDDLFormat = `CREATE TABLE IF NOT EXISTS %[1]s (
	name    text           NOT NULL,
	op      bytea          NOT NULL,
	key     text           NOT NULL,
	seq     numeric(20, 0) NOT NULL CHECK (seq > 0),
	done    boolean        NOT NULL DEFAULT false,
	failure text           NOT NULL DEFAULT '',
	at      timestamptz,
	ord     bigint         GENERATED ALWAYS AS IDENTITY,
	PRIMARY KEY (name, op)
);
CREATE INDEX IF NOT EXISTS %[2]s ON %[1]s (name, done, ord);
CREATE INDEX IF NOT EXISTS %[3]s ON %[1]s (at) WHERE done`

// The journal's statements. Each fenced method sends the guard's admit
// statement (admitFormat) and one of these in one batch: one round trip,
// run by PostgreSQL as one implicit transaction. %[1]s is the fences table,
// %[2]s the intents table. The write runs only if the admit statement left
// the mark at the token's Seq (admitted): the admit statement holds the
// fence row's lock until the transaction ends, so the test reads this
// transaction's own mark.
const (
	admittedFormat = `EXISTS (SELECT FROM %[1]s WHERE name = $1::text AND seq = $2::numeric(20, 0))`

	// beginFormat inserts the fresh record unless op has one, and returns
	// op's record: the one inserted, or the one already there.
	beginFormat = `WITH ins AS (
	INSERT INTO %[2]s (name, op, key, seq)
	SELECT $1::text, $3::bytea, $4::text, $5::numeric(20, 0) WHERE ` + admittedFormat + `
	ON CONFLICT (name, op) DO NOTHING
	RETURNING key, seq, done, failure, at
)
SELECT key, seq::text, done, failure, at FROM ins
UNION ALL
SELECT key, seq::text, done, failure, at FROM %[2]s
	WHERE name = $1 AND op = $3 AND NOT EXISTS (SELECT FROM ins)`

	// finishFormat records the outcome unless one is recorded, and reports
	// whether op has a record.
	finishFormat = `WITH upd AS (
	UPDATE %[2]s SET done = true, failure = $4::text, at = now()
	WHERE name = $1 AND op = $3 AND NOT done AND ` + admittedFormat + `
	RETURNING 1
)
SELECT EXISTS (SELECT FROM upd) OR EXISTS (SELECT FROM %[2]s WHERE name = $1 AND op = $3)`

	// openFormat returns the open records, oldest first.
	openFormat = `SELECT op, key, seq::text FROM %[2]s
WHERE name = $1 AND NOT done AND ` + admittedFormat + `
ORDER BY ord`

	// compactFormat deletes up to $2 finished records older than $1, of
	// every lock, oldest first (the index on at, done records only); it is
	// not fenced.
	compactFormat = `DELETE FROM %[2]s WHERE (name, op) IN (
	SELECT name, op FROM %[2]s WHERE done AND at < $1 ORDER BY at LIMIT $2
)`
)

// IntentStore is an intent.Store on PostgreSQL: a journal of intents in a
// table beside the Guard's fences table, fenced by the Guard's own
// high-water mark. A token that wrote to the journal and a token the Guard
// admitted are ordered by one mark per lock name: once either admits N+1,
// both refuse N. See the package documentation's "Intent journal".
//
// An IntentStore is safe for concurrent use. The zero value is not usable;
// call NewIntentStore.
type IntentStore struct {
	pool    *pgxpool.Pool
	g       *Guard // the admit statement, the fences table's DDL, telemetry
	intents string // quoted identifier
	ddl     string
	begin   string
	finish  string
	open    string
	compact string
}

var _ store.Store = (*IntentStore)(nil)

// NewIntentStore returns a Store on pool. It takes New's options: WithTable
// names the fences table whose marks fence the journal (the journal's own
// table is that name with IntentsSuffix, in the same schema, so its last
// part must be at most 51 bytes); WithTelemetry records each fenced write
// as the Guard records an admission (a refusal counts in
// dlock.fence.rejected). Give it the options of the Guard whose marks it
// shares. It does not touch the database; call Migrate to create the
// tables.
//
// It takes a pool, not a DB: each record is committed in a transaction of
// its own before the Store returns (a pgx.Tx would hold the intent back
// until the caller commits), and the Store is used concurrently.
func NewIntentStore(pool *pgxpool.Pool, opts ...Option) (*IntentStore, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: pool is nil", ErrInvalidOption)
	}
	g, err := New(pool, opts...)
	if err != nil {
		return nil, err
	}
	schema, last := g.parts[:len(g.parts)-1], g.parts[len(g.parts)-1]
	if len(last) > maxTableForIntents {
		return nil, fmt.Errorf("%w: WithTable(%q): the journal needs a table name of at most %d bytes (it adds %q)",
			ErrInvalidOption, strings.Join(g.parts, "."), maxTableForIntents, IntentsSuffix)
	}
	intents := pgx.Identifier(append(slices.Clip(schema), last+IntentsSuffix)).Sanitize()
	index := pgx.Identifier{last + IntentsSuffix + "_ord"}.Sanitize()
	atIndex := pgx.Identifier{last + IntentsSuffix + "_at"}.Sanitize()
	f := func(format string) string { return fmt.Sprintf(format, g.table, intents) }
	return &IntentStore{
		pool:    pool,
		g:       g,
		intents: intents,
		ddl:     g.ddl + ";\n" + fmt.Sprintf(intentDDLFormat, intents, index, atIndex),
		begin:   f(beginFormat),
		finish:  f(finishFormat),
		open:    f(openFormat),
		compact: f(compactFormat),
	}, nil
}

// DDL returns the statements that create s's tables if they do not exist:
// the fences table (as Guard.DDL) and the intents table with its index,
// separated by ";". For the default table it is DDL + ";\n" + IntentDDL.
func (s *IntentStore) DDL() string { return s.ddl }

// Migrate creates s's tables if they do not exist (see DDL); the fences
// table may exist already, made by Guard.Migrate. Run it once (at deploy
// time, or at startup from one process): concurrent CREATE TABLE IF NOT
// EXISTS may fail in PostgreSQL.
func (s *IntentStore) Migrate(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, s.ddl); err != nil {
		return fmt.Errorf("pgfence: migrate %s and %s: %w", s.g.table, s.intents, err)
	}
	return nil
}

// Begin implements intent.Store.
func (s *IntentStore) Begin(ctx context.Context, h store.Grant, fresh store.Intent) (store.Record, error) {
	t := h.Token()
	rec := store.Record{Intent: fresh}
	err := s.fenced(ctx, h, "begin", fresh.Op, s.begin,
		[]any{[]byte(fresh.Op), fresh.Key, strconv.FormatUint(fresh.Token.Seq, 10)},
		func(br pgx.BatchResults) error {
			var seq string
			var at *time.Time
			err := br.QueryRow().Scan(&rec.Key, &seq, &rec.Done, &rec.Failure, &at)
			if errors.Is(err, pgx.ErrNoRows) {
				// Only a writer that skipped the fence row's lock could
				// make this happen.
				return fmt.Errorf("pgfence: %s: no record of %q after inserting it", s.intents, fresh.Op)
			}
			if err != nil {
				return err
			}
			if rec.Token.Seq, err = parseSeq(seq); err != nil {
				return err
			}
			rec.Token.Name = t.Name
			if at != nil {
				rec.At = *at
			}
			return nil
		})
	if err != nil {
		return store.Record{}, err
	}
	return rec, nil
}

// Finish implements intent.Store. The outcome's time is the database's
// clock (now(), the transaction's start). A failure is stored as text:
// invalid UTF-8 and NUL bytes in it become U+FFFD.
func (s *IntentStore) Finish(ctx context.Context, h store.Grant, op, failure string) error {
	failure = strings.ReplaceAll(strings.ToValidUTF8(failure, "\uFFFD"), "\x00", "\uFFFD")
	return s.fenced(ctx, h, "finish", op, s.finish, []any{[]byte(op), failure},
		func(br pgx.BatchResults) error {
			var found bool
			if err := br.QueryRow().Scan(&found); err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("pgfence: %s: no record of %q", s.intents, op)
			}
			return nil
		})
}

// Open implements intent.Store: the mark is raised and the open records
// read in one transaction.
func (s *IntentStore) Open(ctx context.Context, h store.Grant) ([]store.Record, error) {
	t := h.Token()
	var out []store.Record
	err := s.fenced(ctx, h, "open", "", s.open, nil, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Record, error) {
			var op []byte
			var r store.Record
			var seq string
			if err := row.Scan(&op, &r.Key, &seq); err != nil {
				return r, err
			}
			r.Op, r.Token.Name = string(op), t.Name
			r.Token.Seq, err = parseSeq(seq)
			return r, err
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Mark implements intent.Store: the Guard's high-water mark for name.
func (s *IntentStore) Mark(ctx context.Context, name string) (uint64, error) {
	return s.g.Highest(ctx, name)
}

// Compact implements intent.Store: one DELETE of the oldest finished
// records, of every lock, whose outcome was recorded before before, by the
// database's clock. A limit of 0 or less removes nothing.
func (s *IntentStore) Compact(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, ctx.Err()
	}
	tag, err := s.pool.Exec(ctx, s.compact, before, limit)
	if err != nil {
		return 0, fmt.Errorf("pgfence: compact %s: %w", s.intents, err)
	}
	return int(tag.RowsAffected()), nil
}

// fenced runs one fenced step of h's journal as one batch, one implicit
// transaction: the guard's admit statement, then stmt with $1 the lock's
// name, $2 the token's Seq and args from $3 on. read reads stmt's result
// when the token was admitted; a higher mark returns intent.Stale.
func (s *IntentStore) fenced(ctx context.Context, h store.Grant, step, op, stmt string, args []any, read func(pgx.BatchResults) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t := h.Token()
	if err := t.Check(); err != nil {
		return err
	}
	seq := strconv.FormatUint(t.Seq, 10)
	return s.g.tel.Write(ctx, t, func(ctx context.Context) error {
		b := &pgx.Batch{}
		b.Queue(readCommitted)
		b.Queue(s.g.admit, t.Name, seq)
		b.Queue(stmt, append([]any{t.Name, seq}, args...)...)
		err := s.send(ctx, t, b, read)
		if err != nil && !errors.Is(err, store.ErrSuperseded) {
			what := step
			if op != "" {
				what += fmt.Sprintf(" %q", op)
			}
			return fmt.Errorf("pgfence: %s: %s by %s: %w", s.intents, what, t, err)
		}
		return err
	})
}

// readCommitted opens each step's batch: the admit statement must wait for
// the fence row under READ COMMITTED, where the statements after it see
// what the transactions it waited for committed. Under a database default
// of REPEATABLE READ or SERIALIZABLE its snapshot would predate the wait,
// and every step that waited would fail with a serialization error.
const readCommitted = `SET TRANSACTION ISOLATION LEVEL READ COMMITTED`

// send sends b (readCommitted, the admit statement, the step's statement)
// and lets read read the step's result if t was admitted.
func (s *IntentStore) send(ctx context.Context, t fence.Token, b *pgx.Batch, read func(pgx.BatchResults) error) error {
	br := s.pool.SendBatch(ctx, b)
	err := func() error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		var text string
		if err := br.QueryRow().Scan(&text); err != nil {
			return err
		}
		mark, err := parseSeq(text)
		if err != nil {
			return err
		}
		if mark != t.Seq {
			return store.Stale(t, mark)
		}
		return read(br)
	}()
	// Close waits for the commit: a record is durable before the step
	// returns.
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}
