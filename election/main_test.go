package election_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/election"
	"github.com/dlock-go/dlock/session"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newElection(t testing.TB, s *session.Session, name string, opts ...election.Option) *election.Election {
	t.Helper()
	el, err := election.New(s, name, opts...)
	require.NoError(t, err)
	return el
}

// campaignResult is what a Campaign in a goroutine returns.
type campaignResult struct {
	term *election.Term
	err  error
}

// campaignAsync runs Campaign in a goroutine; the result arrives on the
// returned channel. A Term that the test does not take is resigned by the
// session's cleanup.
func campaignAsync(ctx context.Context, el *election.Election, value string) <-chan campaignResult {
	ch := make(chan campaignResult, 1)
	go func() {
		term, err := el.Campaign(ctx, value)
		ch <- campaignResult{term, err}
	}()
	return ch
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// nextPut returns the next put event's key-value on w.
func nextPut(t testing.TB, w clientv3.WatchChan) *mvccpb.KeyValue {
	t.Helper()
	for {
		wr, ok := <-w
		require.True(t, ok, "watch closed")
		require.NoError(t, wr.Err())
		if len(wr.Events) > 0 {
			return wr.Events[0].Kv
		}
	}
}

// receive returns the next state from an Observe channel.
func receive(t testing.TB, ctx context.Context, ch <-chan election.Leader) election.Leader {
	t.Helper()
	select {
	case l, ok := <-ch:
		require.True(t, ok, "Observe channel closed early")
		return l
	case <-ctx.Done():
		require.FailNow(t, "timed out waiting for Observe", "%v", ctx.Err())
		return election.Leader{}
	}
}

// receiveUntil reads ch until it delivers want, and returns every state
// read (want last).
func receiveUntil(t testing.TB, ctx context.Context, ch <-chan election.Leader, want election.Leader) []election.Leader {
	t.Helper()
	var got []election.Leader
	for {
		l := receive(t, ctx, ch)
		got = append(got, l)
		if l == want {
			return got
		}
	}
}

// result waits for a campaignAsync result.
func result(t testing.TB, ctx context.Context, ch <-chan campaignResult) campaignResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		require.FailNow(t, "timed out waiting for Campaign", "%v", ctx.Err())
		return campaignResult{}
	}
}

// waitClosed waits for ch to be closed.
func waitClosed(t testing.TB, ctx context.Context, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-ctx.Done():
		require.FailNow(t, "timed out waiting for "+what, "%v", ctx.Err())
	}
}
