package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testTimeout bounds every test's waits.
const testTimeout = 60 * time.Second

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func newSession(t *testing.T, cli *clientv3.Client, opts ...session.Option) *session.Session {
	t.Helper()
	s, err := session.New(ctxFor(t), cli, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func newMutex(t *testing.T, s *session.Session, name string) *lock.Mutex {
	t.Helper()
	m, err := lock.New(s, name)
	require.NoError(t, err)
	return m
}

func keyCount(t *testing.T, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	resp, err := cli.Get(ctxFor(t), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	require.NoError(t, err)
	return resp.Count
}
