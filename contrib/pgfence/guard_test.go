package pgfence_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/contrib/pgfence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/fencetest"
)

func TestNewValidates(t *testing.T) {
	_, err := pgfence.New(nil)
	require.ErrorIs(t, err, pgfence.ErrInvalidOption)
	assert.ErrorContains(t, err, "db is nil")

	pool := newPool(t, 2)
	for _, bad := range []string{"", "1fences", "fen ces", `f"x`, "a.b.c", "a.", ".b", "x-y", string(make([]byte, 64))} {
		_, err := pgfence.New(pool, pgfence.WithTable(bad))
		assert.ErrorIs(t, err, pgfence.ErrInvalidOption, "table %q", bad)
		assert.ErrorContains(t, err, "WithTable", "table %q", bad)
	}
	for _, good := range []string{"fences", "_f1", "Fences", "app.fences"} {
		_, err := pgfence.New(pool, pgfence.WithTable(good))
		assert.NoError(t, err, "table %q", good)
	}
}

func TestDDLConstantMatchesDefaultTable(t *testing.T) {
	g, err := pgfence.New(newPool(t, 2))
	require.NoError(t, err)
	assert.Equal(t, pgfence.DDL, g.DDL())
}

func TestMigrateIsIdempotentAndCreatesTable(t *testing.T) {
	g, pool := newGuard(t, 2)
	require.NoError(t, g.Migrate(testCtx(t)))
	assert.Equal(t, "numeric", queryString(t, pool,
		`SELECT data_type FROM information_schema.columns WHERE table_name = $1 AND column_name = 'seq'`, pgfence.DefaultTable))
}

// The suite (fence/fencetest) checks Admit with the bad tokens; AdmitTx
// must also roll its transaction back, and Do must not run fn.
func TestAdmitTxAndDoRejectBadTokens(t *testing.T) {
	ctx := testCtx(t)
	g, pool := newGuard(t, 4)
	for _, b := range fencetest.BadTokens {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		assert.ErrorIs(t, g.AdmitTx(ctx, tx, b.Token), b.Want, "AdmitTx(%#v)", b.Token)
		assert.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxClosed, "AdmitTx rolled the transaction back")

		called := false
		err = g.Do(ctx, b.Token, func(pgx.Tx) error { called = true; return nil })
		assert.ErrorIs(t, err, b.Want, "Do(%#v)", b.Token)
		assert.False(t, called, "Do must not run fn for %#v", b.Token)
	}
	assert.Equal(t, "0", queryString(t, pool, `SELECT count(*)::text FROM dlock_fences`), "nothing was stored")
	assert.ErrorContains(t, g.AdmitTx(ctx, nil, fence.Token{Name: "x", Seq: 1}), "tx is nil")
}

func TestCustomTable(t *testing.T) {
	ctx := testCtx(t)
	pool := newPool(t, 2)
	exec(t, pool, `CREATE SCHEMA app`)
	g, err := pgfence.New(pool, pgfence.WithTable("app.Fences"))
	require.NoError(t, err)
	assert.Contains(t, g.DDL(), `"app"."Fences"`)
	require.NoError(t, g.Migrate(ctx))
	require.NoError(t, g.Admit(ctx, fence.Token{Name: "orders", Seq: 3}))
	assert.Equal(t, "3", queryString(t, pool, `SELECT seq::text FROM app."Fences" WHERE name = 'orders'`))
}

func TestAdmitBeforeMigrateFails(t *testing.T) {
	g, err := pgfence.New(newPool(t, 2))
	require.NoError(t, err)
	err = g.Admit(testCtx(t), fence.Token{Name: "orders", Seq: 1})
	require.Error(t, err)
	assert.NotErrorIs(t, err, fence.ErrStaleToken)
	assert.ErrorContains(t, err, "dlock_fences")
}

func TestDoCommitsOrRollsBack(t *testing.T) {
	ctx := testCtx(t)
	g, pool := newGuard(t, 4)
	exec(t, pool, `CREATE TABLE kv (k text PRIMARY KEY, v text NOT NULL)`)

	require.NoError(t, g.Do(ctx, fence.Token{Name: "kv", Seq: 2}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO kv VALUES ('a', 'two')`)
		return err
	}))
	assert.Equal(t, "two", queryString(t, pool, `SELECT v FROM kv WHERE k = 'a'`))

	boom := assert.AnError
	err := g.Do(ctx, fence.Token{Name: "kv", Seq: 3}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE kv SET v = 'three' WHERE k = 'a'`)
		require.NoError(t, err)
		return boom
	})
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, "two", queryString(t, pool, `SELECT v FROM kv WHERE k = 'a'`), "fn failed: its write rolled back")
	h, err := g.Highest(ctx, "kv")
	require.NoError(t, err)
	assert.Equal(t, uint64(2), h, "the mark rolled back with the transaction")

	called := false
	require.NoError(t, g.Admit(ctx, fence.Token{Name: "kv", Seq: 9}))
	err = g.Do(ctx, fence.Token{Name: "kv", Seq: 8}, func(pgx.Tx) error { called = true; return nil })
	assert.ErrorIs(t, err, fence.ErrStaleToken)
	assert.False(t, called, "fn does not run for a stale token")
}

var _ fence.Guard = (*pgfence.Guard)(nil)
