package pgfence_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/contrib/pgfence"
	"github.com/dlock-go/dlock/integration/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Shared(m)) }

// The three handles the package documents as DBs.
var (
	_ pgfence.DB = (*pgxpool.Pool)(nil)
	_ pgfence.DB = (*pgx.Conn)(nil)
	_ pgfence.DB = pgx.Tx(nil)
)

// testCtx bounds one test.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newPool returns a pool on a fresh database of the shared server.
func newPool(t *testing.T, maxConns int) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.NewDatabase(t))
	require.NoError(t, err)
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// newGuard returns a migrated Guard on a fresh database, and its pool.
func newGuard(t *testing.T, maxConns int, opts ...pgfence.Option) (*pgfence.Guard, *pgxpool.Pool) {
	t.Helper()
	pool := newPool(t, maxConns)
	g, err := pgfence.New(pool, opts...)
	require.NoError(t, err)
	require.NoError(t, g.Migrate(testCtx(t)))
	return g, pool
}

func exec(t *testing.T, db pgfence.DB, sql string, args ...any) {
	t.Helper()
	_, err := db.Exec(testCtx(t), sql, args...)
	require.NoError(t, err, sql)
}

func queryString(t *testing.T, db pgfence.DB, sql string, args ...any) string {
	t.Helper()
	var s string
	require.NoError(t, db.QueryRow(testCtx(t), sql, args...).Scan(&s), sql)
	return s
}
