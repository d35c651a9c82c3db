package lock_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newMutex(t *testing.T, s *session.Session, name string) *lock.Mutex {
	t.Helper()
	m, err := lock.New(s, name)
	require.NoError(t, err)
	return m
}
