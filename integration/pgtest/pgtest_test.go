package pgtest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/integration/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Shared(m)) }

// dbName is the database a DSN from pgtest names.
func dbName(dsn string) string {
	path, _, _ := strings.Cut(dsn[strings.LastIndex(dsn, "/")+1:], "?")
	return path
}

func TestNewDatabaseIsFreshAndSeparate(t *testing.T) {
	s := pgtest.Start(t)
	a, b := s.NewDatabase(t), s.NewDatabase(t)
	assert.NotEqual(t, a, b)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dbA, err := s.Query(ctx, dbName(a), "SELECT current_database()")
	require.NoError(t, err)
	dbB, err := s.Query(ctx, dbName(b), "SELECT current_database()")
	require.NoError(t, err)
	assert.Equal(t, dbName(a), dbA)
	assert.Equal(t, dbName(b), dbB)
	n, err := s.Query(ctx, dbName(a), "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
	require.NoError(t, err)
	assert.Equal(t, "0", n)
}

func TestSharedServer(t *testing.T) {
	a, b := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
	assert.NotEqual(t, a, b)
	assert.Contains(t, a, "sslmode=disable")
}

func TestStartAndStop(t *testing.T) {
	s := pgtest.Start(t)
	dsn := s.NewDatabase(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	fsync, err := s.Query(ctx, dbName(dsn), "SHOW fsync")
	require.NoError(t, err)
	assert.Equal(t, "off", fsync)
	_, err = s.Query(ctx, dbName(dsn), "SELEC 1")
	assert.ErrorContains(t, err, "syntax error", "a bad query says why")
	require.NoError(t, s.Stop())
	require.NoError(t, s.Stop(), "Stop is idempotent")

	_, err = s.Query(ctx, dbName(dsn), "SELECT 1")
	assert.Error(t, err, "a stopped server refuses connections")
}
