package redisfence_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/contrib/redisfence"
	"github.com/dlock-go/dlock/integration/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testCtx bounds one test.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newGuard starts a real redis-server for t and returns a Guard on it and a
// client.
func newGuard(t *testing.T, opts ...redisfence.Option) (*redisfence.Guard, goredis.UniversalClient) {
	t.Helper()
	client := redistest.Start(t).Client(t)
	g, err := redisfence.New(client, opts...)
	require.NoError(t, err)
	return g, client
}
