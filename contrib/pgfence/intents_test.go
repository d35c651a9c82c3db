package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/contrib/pgfence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/pgtest"
	"github.com/dlock-go/dlock/intent"
	"github.com/dlock-go/dlock/intent/intenttest"
)

// newIntentStore returns a migrated IntentStore on a fresh database, and its
// pool.
func newIntentStore(t *testing.T, maxConns int, opts ...pgfence.Option) (*pgfence.IntentStore, *pgxpool.Pool) {
	t.Helper()
	pool := newPool(t, maxConns)
	s, err := pgfence.NewIntentStore(pool, opts...)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(testCtx(t)))
	return s, pool
}

// The intent.Store conformance suite, on one store: each test uses lock
// names of its own.
func TestIntentStoreConformance(t *testing.T) {
	s, _ := newIntentStore(t, 8)
	intenttest.Run(t, intenttest.Backend{New: func(*testing.T) intent.Store { return s }})
}

// The suite again, on a database whose default isolation is SERIALIZABLE:
// each step runs at READ COMMITTED all the same (without it, a step that
// waited for the fence row fails with a serialization error).
func TestIntentStoreConformanceSerializableDefault(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(pgtest.NewDatabase(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "serializable"
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := pgfence.NewIntentStore(pool)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(testCtx(t)))
	intenttest.Run(t, intenttest.Backend{New: func(*testing.T) intent.Store { return s }})
}

func TestNewIntentStoreValidates(t *testing.T) {
	_, err := pgfence.NewIntentStore(nil)
	require.ErrorIs(t, err, pgfence.ErrInvalidOption)
	assert.ErrorContains(t, err, "pool is nil")

	pool := newPool(t, 2)
	_, err = pgfence.NewIntentStore(pool, pgfence.WithTable("a.b.c"))
	assert.ErrorIs(t, err, pgfence.ErrInvalidOption, "New's checks apply")
	// The intents table and its index must fit in 63 bytes.
	_, err = pgfence.NewIntentStore(pool, pgfence.WithTable("app."+strings.Repeat("f", 52)))
	assert.ErrorIs(t, err, pgfence.ErrInvalidOption)
	assert.ErrorContains(t, err, "at most 51 bytes")
	_, err = pgfence.NewIntentStore(pool, pgfence.WithTable("app."+strings.Repeat("f", 51)))
	assert.NoError(t, err)
}

func TestIntentDDLConstantMatchesDefaultTable(t *testing.T) {
	s, err := pgfence.NewIntentStore(newPool(t, 2))
	require.NoError(t, err)
	assert.Equal(t, pgfence.DDL+";\n"+pgfence.IntentDDL, s.DDL())
}

// The tables come from Migrate (or DDL): before it, the journal fails
// with an error naming its table, and refuses nothing as stale; after it,
// both tables exist; Migrate is idempotent, and adds the intents table
// beside a fences table that Guard.Migrate made.
func TestIntentStoreMigrate(t *testing.T) {
	ctx := testCtx(t)
	g, pool := newGuard(t, 4)
	require.NoError(t, g.Admit(ctx, fence.Token{Name: "orders", Seq: 5}))
	s, err := pgfence.NewIntentStore(pool)
	require.NoError(t, err)
	j := intent.New(s)
	called := false
	err = j.Do(ctx, intenttest.NewHeld("orders", 5), "op", func(context.Context, string) error { called = true; return nil })
	require.Error(t, err)
	assert.NotErrorIs(t, err, intent.ErrSuperseded)
	assert.ErrorContains(t, err, "dlock_fences_intents")
	assert.False(t, called, "fn must not run without a journal")

	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Migrate(ctx), "Migrate is idempotent")
	assert.Equal(t, "5", queryString(t, pool, `SELECT seq::text FROM dlock_fences WHERE name = 'orders'`), "the fences table is kept")
	assert.Equal(t, "name,op,key,seq,done,failure,at,ord", queryString(t, pool,
		`SELECT string_agg(column_name, ',' ORDER BY ordinal_position) FROM information_schema.columns WHERE table_name = 'dlock_fences_intents'`))
	require.NoError(t, j.Do(ctx, intenttest.NewHeld("orders", 5), "op", func(context.Context, string) error { called = true; return nil }))
	assert.True(t, called)
}

func TestIntentStoreCustomTable(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t, 2)
	exec(t, pool, `CREATE SCHEMA ops`)
	s, err := pgfence.NewIntentStore(pool, pgfence.WithTable("ops.Fences"))
	require.NoError(t, err)
	assert.Contains(t, s.DDL(), `CREATE TABLE IF NOT EXISTS "ops"."Fences" (`)
	assert.Contains(t, s.DDL(), `CREATE TABLE IF NOT EXISTS "ops"."Fences_intents" (`)
	assert.Contains(t, s.DDL(), `CREATE INDEX IF NOT EXISTS "Fences_intents_ord" ON "ops"."Fences_intents"`)
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, intent.New(s).Do(ctx, intenttest.NewHeld("orders", 3), "op", func(context.Context, string) error { return nil }))
	assert.Equal(t, "3", queryString(t, pool, `SELECT seq::text FROM ops."Fences" WHERE name = 'orders'`))
	assert.Equal(t, "op|3|true", queryString(t, pool, `SELECT convert_from(op, 'UTF8') || '|' || seq || '|' || done FROM ops."Fences_intents"`))
}

// The journal and the Guard share one mark per lock name: a later holder
// that writes through the Guard supersedes an earlier holder's journal,
// and a journal write supersedes an earlier token at the Guard. The
// control, the same steps with the later token admitted by a Guard on
// another table, lets the earlier holder's operation run: what refuses it
// is the shared mark.
func TestIntentStoreSharesTheGuardsMark(t *testing.T) {
	ctx := testCtx(t)
	s, pool := newIntentStore(t, 4)
	exec(t, pool, `CREATE TABLE kv (k text PRIMARY KEY, v text NOT NULL)`)
	j := intent.New(s)
	g, err := pgfence.New(pool)
	require.NoError(t, err)
	other, err := pgfence.New(pool, pgfence.WithTable("other_fences"))
	require.NoError(t, err)
	require.NoError(t, other.Migrate(ctx))

	run := func(g *pgfence.Guard, name string) (called bool, err error) {
		a := intenttest.NewHeld(name, 10)
		require.NoError(t, j.Do(ctx, a, "charge/1", func(context.Context, string) error { return nil }))
		// A pauses; B is granted 20 and writes through the Guard.
		require.NoError(t, g.Do(ctx, fence.Token{Name: name, Seq: 20}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO kv VALUES ($1, 'B')`, name)
			return err
		}))
		// A wakes up and starts its next operation.
		err = j.Do(ctx, a, "charge/2", func(context.Context, string) error { called = true; return nil })
		return called, err
	}

	called, err := run(g, "billing/eu")
	assert.ErrorIs(t, err, intent.ErrSuperseded)
	var st *fence.StaleTokenError
	if assert.ErrorAs(t, err, &st) {
		assert.Equal(t, fence.StaleTokenError{Name: "billing/eu", Seq: 10, Highest: 20}, *st)
	}
	assert.False(t, called, "the superseded holder's call must not run")

	// The other way round: a journal write by 30 makes the Guard refuse 25.
	require.NoError(t, j.Do(ctx, intenttest.NewHeld("billing/eu", 30), "charge/3", func(context.Context, string) error { return nil }))
	err = g.Admit(ctx, fence.Token{Name: "billing/eu", Seq: 25})
	if assert.ErrorAs(t, err, &st) {
		assert.Equal(t, uint64(30), st.Highest)
	}
	h, err := g.Highest(ctx, "billing/eu")
	require.NoError(t, err)
	assert.Equal(t, uint64(30), h, "one mark: the journal raised the Guard's")

	// The control: B's token admitted on another table leaves A's mark.
	called, err = run(other, "billing/us")
	assert.NoError(t, err, "control: nothing on the journal's mark supersedes A")
	assert.True(t, called, "control: A's operation runs")
}

// A Guard transaction that admitted 20 holds the fence row: the journal's
// write with 10 waits for it, and is refused once it commits. The control:
// when that transaction rolls back, its mark goes with it, and the same
// write is admitted.
func TestIntentStoreWaitsForGuardTransaction(t *testing.T) {
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			ctx := testCtx(t)
			s, pool := newIntentStore(t, 4)
			g, err := pgfence.New(pool)
			require.NoError(t, err)
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(context.WithoutCancel(ctx))
			require.NoError(t, g.AdmitTx(ctx, tx, fence.Token{Name: "jobs", Seq: 20}))

			done := make(chan error, 1)
			go func() {
				_, err := s.Begin(ctx, intenttest.NewHeld("jobs", 10),
					intent.Intent{Op: "op", Key: "k", Token: fence.Token{Name: "jobs", Seq: 10}})
				done <- err
			}()
			waitForLockWaiter(t, pool)
			select {
			case err := <-done:
				t.Fatalf("Begin finished while the Guard's transaction held the fence row: %v", err)
			default:
			}
			if commit {
				require.NoError(t, tx.Commit(ctx))
				err := <-done
				assert.ErrorIs(t, err, intent.ErrSuperseded)
				assert.Equal(t, "0", queryString(t, pool, `SELECT count(*)::text FROM dlock_fences_intents`), "a refused Begin writes nothing")
			} else {
				require.NoError(t, tx.Rollback(ctx))
				assert.NoError(t, <-done, "control: the rolled-back mark does not refuse 10")
				assert.Equal(t, "1", queryString(t, pool, `SELECT count(*)::text FROM dlock_fences_intents`))
			}
		})
	}
}

// What the table holds: one row per operation, with the first writer's
// token and key, and the outcome stamped by the database's clock; any
// bytes in an op id round-trip.
func TestIntentStoreRows(t *testing.T) {
	ctx := testCtx(t)
	s, pool := newIntentStore(t, 4)
	j := intent.New(s)
	h := intenttest.NewHeld("mail", 7)
	before := queryString(t, pool, `SELECT now()::text`)
	require.NoError(t, j.Do(ctx, h, "send/1", func(context.Context, string) error { return nil }))
	err := j.Do(ctx, h, "send/2", func(context.Context, string) error { return intent.Failed(errors.New("bounced\x00\xff")) })
	require.ErrorIs(t, err, intent.ErrFailed)
	odd := "\xff\x00 op"
	require.ErrorIs(t, j.Do(ctx, h, odd, func(context.Context, string) error { return assert.AnError }), assert.AnError)

	rows, err := pool.Query(ctx, `SELECT op, key, seq::text, done, failure, at >= $1::timestamptz AND at <= now()
		FROM dlock_fences_intents ORDER BY ord`, before)
	require.NoError(t, err)
	type row struct {
		Op             []byte
		Key, Seq       string
		Done           bool
		Failure        string
		AtFromDatabase *bool
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	yes := true
	assert.Equal(t, []row{
		{[]byte("send/1"), intent.Key("mail", "send/1", 7), "7", true, "", &yes},
		{[]byte("send/2"), intent.Key("mail", "send/2", 7), "7", true, "bounced\uFFFD\uFFFD", &yes},
		{[]byte(odd), intent.Key("mail", odd, 7), "7", false, "", nil},
	}, got)

	p, err := j.Pending(ctx, intenttest.NewHeld("mail", 8))
	require.NoError(t, err)
	require.Len(t, p, 1)
	assert.Equal(t, odd, p[0].Op)
	assert.Equal(t, fence.Token{Name: "mail", Seq: 7}, p[0].Token)

	// Compact compares the database's stamp with the caller's time.
	n, err := s.Compact(ctx, time.Now().Add(-time.Minute), 10)
	require.NoError(t, err)
	assert.Zero(t, n)
	n, err = s.Compact(ctx, time.Now().Add(time.Minute), 0)
	require.NoError(t, err)
	assert.Zero(t, n, "limit 0 removes nothing")
	n, err = s.Compact(ctx, time.Now().Add(time.Minute), 10)
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	assert.Equal(t, "1", queryString(t, pool, `SELECT count(*)::text FROM dlock_fences_intents`), "the open record stays")
}

var _ intent.Store = (*pgfence.IntentStore)(nil)
