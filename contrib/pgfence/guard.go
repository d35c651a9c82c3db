package pgfence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock/telemetry"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlock-go/dlock/fence"
)

// DDL creates the default fences table (DefaultTable). Apply it with your
// migration tool, or call Guard.Migrate. Guard.DDL gives the statement for a
// table set with WithTable.
const DDL = `CREATE TABLE IF NOT EXISTS "dlock_fences" (
	name       text           PRIMARY KEY,
	seq        numeric(20, 0) NOT NULL CHECK (seq > 0),
	updated_at timestamptz    NOT NULL DEFAULT now()
)`

const ddlFormat = `CREATE TABLE IF NOT EXISTS %s (
	name       text           PRIMARY KEY,
	seq        numeric(20, 0) NOT NULL CHECK (seq > 0),
	updated_at timestamptz    NOT NULL DEFAULT now()
)`

// admitFormat is the whole check: one statement that inserts the name or
// raises its mark, never lowers it, and returns the mark after the
// statement. The mark equals the token's Seq exactly when the token is
// admitted; a higher mark means the token is stale, and it is the number to
// report. ON CONFLICT DO UPDATE locks the row until the transaction ends,
// admitted or not.
const admitFormat = `INSERT INTO %s AS f (name, seq) VALUES ($1, $2::numeric(20, 0))
ON CONFLICT (name) DO UPDATE
	SET seq = GREATEST(f.seq, EXCLUDED.seq),
	    updated_at = CASE WHEN f.seq <= EXCLUDED.seq THEN now() ELSE f.updated_at END
RETURNING seq::text`

const highestFormat = `SELECT seq::text FROM %s WHERE name = $1`

// DB is what a Guard needs from the database. *pgxpool.Pool, *pgx.Conn and
// pgx.Tx all satisfy it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Guard is a fence.Guard whose high-water marks live in a PostgreSQL table.
// A Guard is safe for concurrent use if its DB is (*pgxpool.Pool is; a
// *pgx.Conn or pgx.Tx is not). The zero value is not usable; call New.
type Guard struct {
	db      DB
	parts   []string // the table's identifier parts: [table] or [schema, table]
	table   string   // quoted identifier
	ddl     string
	admit   string
	highest string
	tel     *telemetry.Fence
}

var _ fence.Guard = (*Guard)(nil)

// New returns a Guard that uses db. It does not touch the database; call
// Migrate to create the table.
func New(db DB, opts ...Option) (*Guard, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: db is nil", ErrInvalidOption)
	}
	o := defaults()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	table := pgx.Identifier(o.table).Sanitize()
	return &Guard{
		db:      db,
		parts:   o.table,
		table:   table,
		ddl:     fmt.Sprintf(ddlFormat, table),
		admit:   fmt.Sprintf(admitFormat, table),
		highest: fmt.Sprintf(highestFormat, table),
		tel:     telemetry.NewFence("postgres", o.tel),
	}, nil
}

// DDL returns the statement that creates g's fences table if it does not
// exist.
func (g *Guard) DDL() string { return g.ddl }

// Migrate creates g's fences table if it does not exist. Run it once (at
// deploy time, or at startup from one process): concurrent CREATE TABLE IF
// NOT EXISTS may fail in PostgreSQL.
func (g *Guard) Migrate(ctx context.Context) error {
	if _, err := g.db.Exec(ctx, g.ddl); err != nil {
		return fmt.Errorf("pgfence: migrate %s: %w", g.table, err)
	}
	return nil
}

// Admit admits t in one statement on g's DB, in its own transaction unless
// that DB is a pgx.Tx. It returns nil if t.Seq is at least the stored mark
// for t.Name (raising the mark to t.Seq), a *fence.StaleTokenError (matching
// fence.ErrStaleToken) carrying the stored mark if it is lower, an error
// matching fence.ErrNoToken for Seq 0 and fence.ErrInvalidToken for an empty
// Name. Admit alone does not protect a write made elsewhere; see AdmitTx.
func (g *Guard) Admit(ctx context.Context, t fence.Token) error {
	if err := t.Check(); err != nil {
		return err
	}
	return g.exec(ctx, g.db, t)
}

// AdmitTx admits t inside tx, with the same results as Admit. The fence row
// stays locked until tx ends, so the check and the writes made in tx commit
// together or not at all, and a concurrent AdmitTx for the same name waits
// for tx. On any error AdmitTx rolls tx back (a later Commit returns
// pgx.ErrTxClosed), so the protected writes cannot commit by mistake.
func (g *Guard) AdmitTx(ctx context.Context, tx pgx.Tx, t fence.Token) error {
	if tx == nil {
		return fmt.Errorf("%w: tx is nil", ErrInvalidOption)
	}
	err := t.Check()
	if err == nil {
		err = g.exec(ctx, tx, t)
	}
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		if rerr := tx.Rollback(rctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) {
			return errors.Join(err, fmt.Errorf("pgfence: rollback: %w", rerr))
		}
	}
	return err
}

// Do runs fn in a new transaction on g's DB that has admitted t first (see
// AdmitTx), and commits it if fn returns nil. If t is rejected fn is not
// called; if fn fails the transaction is rolled back and fn's error is
// returned as is.
func (g *Guard) Do(ctx context.Context, t fence.Token, fn func(tx pgx.Tx) error) error {
	if err := t.Check(); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, g.db, func(tx pgx.Tx) error {
		if err := g.AdmitTx(ctx, tx, t); err != nil {
			return err
		}
		return fn(tx)
	})
}

// Highest returns the stored mark for name, or 0 if no token was admitted
// for it.
func (g *Guard) Highest(ctx context.Context, name string) (uint64, error) {
	var text string
	err := g.db.QueryRow(ctx, g.highest, name).Scan(&text)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("pgfence: highest %q: %w", name, err)
	}
	return parseSeq(text)
}

func (g *Guard) exec(ctx context.Context, db DB, t fence.Token) error {
	return g.tel.Write(ctx, t, func(ctx context.Context) error { return g.admitOn(ctx, db, t) })
}

func (g *Guard) admitOn(ctx context.Context, db DB, t fence.Token) error {
	var text string
	if err := db.QueryRow(ctx, g.admit, t.Name, strconv.FormatUint(t.Seq, 10)).Scan(&text); err != nil {
		return fmt.Errorf("pgfence: admit %s: %w", t, err)
	}
	mark, err := parseSeq(text)
	if err != nil {
		return err
	}
	if mark != t.Seq {
		return &fence.StaleTokenError{Name: t.Name, Seq: t.Seq, Highest: mark}
	}
	return nil
}

func parseSeq(text string) (uint64, error) {
	v, err := strconv.ParseUint(text, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("pgfence: stored seq %q: %w", text, err)
	}
	return v, nil
}

// rollbackTimeout bounds the rollback of a transaction whose caller's ctx
// may have ended.
const rollbackTimeout = 5 * time.Second
