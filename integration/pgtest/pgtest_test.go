package pgtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/integration/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Shared(m)) }

func query(t *testing.T, dsn, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(ctx))
	var out string
	require.NoError(t, conn.QueryRow(ctx, sql).Scan(&out))
	return out
}

func TestNewDatabaseIsFreshAndSeparate(t *testing.T) {
	a := pgtest.NewDatabase(t)
	b := pgtest.NewDatabase(t)
	assert.NotEqual(t, a, b)
	dbA := query(t, a, "SELECT current_database()")
	dbB := query(t, b, "SELECT current_database()")
	assert.NotEqual(t, dbA, dbB)
	assert.Equal(t, "0", query(t, a, "SELECT count(*)::text FROM pg_tables WHERE schemaname = 'public'"))
}

func TestStartAndStop(t *testing.T) {
	s := pgtest.Start(t)
	dsn := s.NewDatabase(t)
	assert.Equal(t, "off", query(t, dsn, "SHOW fsync"))
	require.NoError(t, s.Stop())
	require.NoError(t, s.Stop(), "Stop is idempotent")

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := pgx.Connect(ctx, dsn)
	assert.Error(t, err, "a stopped server refuses connections")
}
