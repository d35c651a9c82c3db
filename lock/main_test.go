package lock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fastBeat makes a session heartbeat often, so that a test that deletes a
// held key by hand sees the loss soon (a session checks its held keys at
// each heartbeat).
var fastBeat = session.WithHeartbeat(200 * time.Millisecond)

func newMutex(t *testing.T, s *session.Session, name string) *lock.Mutex {
	t.Helper()
	m, err := lock.New(s, name)
	require.NoError(t, err)
	return m
}
