package session_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/telemetry"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/session"
)

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wrote chan struct{} // a send after each write (its one slot keeps a wake-up)
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{wrote: make(chan struct{}, 1)} }

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	n, err := s.b.Write(p)
	s.mu.Unlock()
	select {
	case s.wrote <- struct{}{}:
	default:
	}
	return n, err
}

// await waits until a record with message msg is written, or ctx ends.
func (s *syncBuffer) await(t *testing.T, ctx context.Context, msg string) {
	t.Helper()
	for {
		for _, r := range s.records(t) {
			if r["msg"] == msg {
				return
			}
		}
		select {
		case <-s.wrote:
		case <-ctx.Done():
			t.Fatalf("no log record %q: %v", msg, ctx.Err())
		}
	}
}

// records returns the JSON log records written so far.
func (s *syncBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	dec := json.NewDecoder(bytes.NewReader(s.b.Bytes()))
	for dec.More() {
		var r map[string]any
		require.NoError(t, dec.Decode(&r))
		out = append(out, r)
	}
	return out
}

// A Manager hands out one live session; after it ends (its lease revoked
// by the server), the next Current starts one fresh session that every
// concurrent caller shares. The end is logged at WARN, the start at INFO.
func TestManagerRenews(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	logs := newSyncBuffer()
	m, err := session.NewManager(cli, session.WithTTL(2*time.Second), session.WithTelemetry(telemetry.Providers{Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}))
	require.NoError(t, err)
	defer m.Close(ctx)

	first, err := m.Current(ctx)
	require.NoError(t, err)
	again, err := m.Current(ctx)
	require.NoError(t, err)
	assert.Same(t, first, again, "one live session")

	_, err = cli.Revoke(ctx, first.Lease())
	require.NoError(t, err)
	<-first.Done() // the next keepalive finds the lease gone
	require.ErrorIs(t, first.Err(), session.ErrLeaseGone)

	const callers = 8
	got := make(chan *session.Session, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			s, err := m.Current(ctx)
			assert.NoError(t, err)
			got <- s
		})
	}
	wg.Wait()
	close(got)
	var second *session.Session
	for s := range got {
		if second == nil {
			second = s
		}
		assert.Same(t, second, s, "concurrent callers share one new session")
	}
	require.NotNil(t, second)
	assert.NotEqual(t, first.Lease(), second.Lease())
	assert.NoError(t, second.Err())

	// The end is logged just after Done closes, by the goroutine that
	// ended the session: wait for the record (CI's race run once read
	// the log before it).
	logs.await(t, ctx, "dlock: session ended")
	var ended, started int
	for _, r := range logs.records(t) {
		switch r["msg"] {
		case "dlock: session ended":
			assert.Equal(t, "WARN", r["level"])
			assert.Contains(t, r["cause"], "lease gone")
			ended++
		case "dlock: session started":
			assert.Equal(t, "INFO", r["level"])
			started++
		}
	}
	assert.Equal(t, 1, ended, "session ends logged")
	assert.Equal(t, 2, started, "session starts logged")

	require.NoError(t, m.Close(ctx))
	require.NoError(t, m.Close(ctx), "Close is idempotent")
	assert.ErrorIs(t, second.Err(), session.ErrClosed)
	_, err = m.Current(ctx)
	assert.ErrorIs(t, err, session.ErrManagerClosed)
	resp, err := cli.Leases(ctx)
	require.NoError(t, err)
	assert.Empty(t, resp.Leases, "Close revoked the lease")
}

// While etcd is unreachable, Current retries until its ctx ends and then
// says why the last attempt failed; bad options fail at once.
func TestManagerUnreachable(t *testing.T) {
	t.Parallel()
	// A client of a port nobody listens on.
	cli := etcdtest.NewClient(t, clientv3.Config{Endpoints: []string{etcdtest.FreeAddr(t)}, DialTimeout: time.Second})
	m, err := session.NewManager(cli)
	require.NoError(t, err)
	defer m.Close(context.Background())
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err = m.Current(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	_, err = session.NewManager(nil)
	assert.ErrorIs(t, err, session.ErrInvalidOption)
	_, err = session.NewManager(cli, session.WithTTL(time.Second))
	assert.ErrorIs(t, err, session.ErrInvalidOption)
	_, err = session.NewManager(cli, nil)
	assert.ErrorIs(t, err, session.ErrInvalidOption, "a nil option")
}
