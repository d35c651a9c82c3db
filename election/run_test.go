package election_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/election"
	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

// runAsync runs Run in a goroutine; its error arrives on the channel.
func runAsync(ctx context.Context, cfg election.Config) <-chan error {
	errc := make(chan error, 1)
	go func() { errc <- election.Run(ctx, cfg) }()
	return errc
}

func recv[T any](t *testing.T, ctx context.Context, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		require.FailNow(t, "timed out waiting for "+what)
		var zero T
		return zero
	}
}

// Losing the key cancels OnElected's ctx with a cause matching
// ErrLeadershipLost; OnStoppedLeading runs; without Recampaign Run returns
// the loss.
func TestRunStepsDownOnLoss(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	elected := make(chan *election.Term, 1)
	causes := make(chan error, 1)
	stopped := make(chan struct{}, 1)
	errc := runAsync(ctx, election.Config{
		Client: cli, Name: "run", Value: "me",
		OnElected: func(ctx context.Context, term *election.Term) error {
			elected <- term
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return context.Cause(ctx)
		},
		OnStoppedLeading: func() { stopped <- struct{}{} },
	})
	term := recv(t, ctx, elected, "OnElected")
	_, err := cli.Delete(ctx, election.TermKey(term))
	require.NoError(t, err)
	cause := recv(t, ctx, causes, "OnElected's ctx to end")
	assert.ErrorIs(t, cause, election.ErrLeadershipLost)
	assert.ErrorIs(t, cause, election.ErrKeyDeleted)
	recv(t, ctx, stopped, "OnStoppedLeading")
	err = recv(t, ctx, errc, "Run to return")
	assert.ErrorIs(t, err, election.ErrLeadershipLost)
}

// With Recampaign, Run campaigns again on a fresh session after a loss;
// cancelling ctx resigns and returns ctx's error. OnNewLeader sees both
// terms.
func TestRunRecampaign(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	elected := make(chan *election.Term, 2)
	var (
		mu      sync.Mutex
		leaders []election.Leader
		stops   int
		wantSee = make(chan uint64, 1) // an epoch OnNewLeader should report
		seen    = make(chan struct{})
	)
	errc := runAsync(rctx, election.Config{
		Client: cli, Name: "again", Value: "me",
		Recampaign: true, RetryPeriod: 10 * time.Millisecond,
		OnElected: func(ctx context.Context, term *election.Term) error {
			elected <- term
			<-ctx.Done()
			return nil
		},
		OnStoppedLeading: func() { mu.Lock(); stops++; mu.Unlock() },
		OnNewLeader: func(l election.Leader) {
			mu.Lock()
			defer mu.Unlock()
			leaders = append(leaders, l)
			select {
			case e := <-wantSee:
				if e == l.Epoch {
					close(seen)
				} else {
					wantSee <- e
				}
			default:
			}
		},
	})
	first := recv(t, ctx, elected, "first term")
	_, err := cli.Delete(ctx, election.TermKey(first))
	require.NoError(t, err)
	second := recv(t, ctx, elected, "second term")
	assert.Greater(t, second.Epoch(), first.Epoch())
	waitClosed(t, ctx, first.Done(), "first.Done")
	mu.Lock()
	already := slices.Contains(leaders, election.Leader{Value: "me", Epoch: second.Epoch()})
	if !already {
		wantSee <- second.Epoch()
	}
	mu.Unlock()
	if !already {
		recv(t, ctx, seen, "OnNewLeader to report the second term")
	}
	cancel()
	err = recv(t, ctx, errc, "Run to return")
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, second.Err(), election.ErrResigned, "Run resigns when ctx ends")
	assert.Zero(t, etcdtest.KeyCount(t, cli, election.DefaultPrefix+"/again/"))

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 2, stops, "OnStoppedLeading after every OnElected")
	assert.Contains(t, leaders, election.Leader{Value: "me", Epoch: second.Epoch()})
	for i := 1; i < len(leaders); i++ {
		if leaders[i] != (election.Leader{}) {
			assert.GreaterOrEqual(t, leaders[i].Epoch, leaders[i-1].Epoch, "OnNewLeader never goes back")
		}
	}
}

// When OnElected returns while leading, Run resigns and returns its error;
// a second candidate's OnNewLeader sees the first, then takes over.
func TestRunHandover(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	release := make(chan struct{})
	errDone := errors.New("work done")
	stopped := make(chan struct{}, 1)
	aElected := make(chan struct{})
	errA := runAsync(ctx, election.Config{
		Client: cli, Name: "handover", Value: "a",
		OnElected: func(ctx context.Context, term *election.Term) error {
			close(aElected)
			<-release
			return errDone
		},
		OnStoppedLeading: func() { stopped <- struct{}{} },
	})
	recv(t, ctx, aElected, "a elected")
	sawA := make(chan struct{})
	var once sync.Once
	bElected := make(chan *election.Term, 1)
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	errB := runAsync(bctx, election.Config{
		Client: cli, Name: "handover", Value: "b",
		OnElected: func(ctx context.Context, term *election.Term) error {
			bElected <- term
			<-ctx.Done()
			return nil
		},
		OnNewLeader: func(l election.Leader) {
			if l.Value == "a" {
				once.Do(func() { close(sawA) })
			}
		},
	})
	recv(t, ctx, sawA, "b to observe a")
	close(release)
	assert.ErrorIs(t, recv(t, ctx, errA, "a's Run"), errDone)
	recv(t, ctx, stopped, "a's OnStoppedLeading")
	term := recv(t, ctx, bElected, "b elected")
	assert.Equal(t, "b", term.Value())
	bcancel()
	assert.ErrorIs(t, recv(t, ctx, errB, "b's Run"), context.Canceled)
}

func TestRunBadConfig(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	onElected := func(context.Context, *election.Term) error { return nil }
	valid := election.Config{Client: cli, Name: "x", Value: "v", OnElected: onElected}
	require.NoError(t, valid.Validate())

	for _, tc := range []struct {
		what   string
		mutate func(*election.Config)
		want   []error
		field  string
	}{
		{"nil client", func(c *election.Config) { c.Client = nil }, []error{election.ErrInvalidOption}, "Client"},
		{"empty name", func(c *election.Config) { c.Name = "" }, []error{election.ErrInvalidName, lock.ErrInvalidName}, "name"},
		{"bad name", func(c *election.Config) { c.Name = "a b" }, []error{election.ErrInvalidName}, "name"},
		{"empty value", func(c *election.Config) { c.Value = "" }, []error{election.ErrInvalidOption}, "Value"},
		{"nil OnElected", func(c *election.Config) { c.OnElected = nil }, []error{election.ErrInvalidOption}, "OnElected"},
		{"negative retry", func(c *election.Config) { c.RetryPeriod = -time.Second }, []error{election.ErrInvalidOption}, "RetryPeriod"},
		{"bad prefix", func(c *election.Config) { c.Options = []election.Option{election.WithPrefix("p/")} }, []error{election.ErrInvalidOption}, "prefix"},
		{"prefix with %", func(c *election.Config) { c.Options = []election.Option{election.WithPrefix("p%q")} }, []error{election.ErrInvalidOption}, "'%'"},
		{"nil session option", func(c *election.Config) { c.SessionOptions = []session.Option{nil} }, []error{election.ErrInvalidOption}, "SessionOptions"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			cfg := valid
			tc.mutate(&cfg)
			for _, err := range []error{cfg.Validate(), election.Run(ctx, cfg)} {
				for _, want := range tc.want {
					assert.ErrorIs(t, err, want)
				}
				assert.ErrorContains(t, err, tc.field)
			}
		})
	}

	cfg := valid
	cfg.SessionOptions = []session.Option{session.WithTTL(1500 * time.Millisecond)}
	cfg.Recampaign = true
	assert.ErrorIs(t, election.Run(ctx, cfg), session.ErrInvalidOption, "an invalid session option is not retried")
}

// A Run that is never elected still calls OnStoppedLeading, once, when it
// returns (as client-go does), and never OnElected.
func TestRunNeverElectedStillStops(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	el := newElection(t, etcdtest.Session(t, cli), "never")
	leader, err := el.Campaign(ctx, "incumbent")
	require.NoError(t, err)
	defer leader.Resign(ctx)

	w := etcdtest.WatchPuts(t, cli, election.PrefixOf(el))
	rctx, cancel := context.WithCancel(ctx)
	stops := make(chan struct{}, 2)
	errc := runAsync(rctx, election.Config{
		Client: cli, Name: "never", Value: "challenger",
		OnElected: func(context.Context, *election.Term) error {
			t.Error("OnElected must not run")
			return nil
		},
		OnStoppedLeading: func() { stops <- struct{}{} },
	})
	etcdtest.WaitPuts(t, w, 1) // the challenger is queued
	cancel()
	assert.ErrorIs(t, recv(t, ctx, errc, "Run"), context.Canceled)
	assert.Len(t, stops, 1, "OnStoppedLeading is called exactly once")
}

// A panic in OnElected resigns the term and calls OnStoppedLeading before
// it reaches Run's caller: no candidate key is left, and another
// candidate is elected.
func TestRunResignsOnPanic(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	var term *election.Term
	stopped := false
	func() {
		defer func() {
			assert.Equal(t, "boom", recover(), "the panic reaches Run's caller")
		}()
		_ = election.Run(ctx, election.Config{
			Client: cli, Name: "panic", Value: "me",
			OnElected: func(ctx context.Context, t *election.Term) error {
				term = t
				panic("boom")
			},
			OnStoppedLeading: func() { stopped = true },
		})
	}()
	require.NotNil(t, term)
	assert.True(t, stopped, "OnStoppedLeading ran")
	assert.ErrorIs(t, term.Err(), election.ErrResigned)
	assert.Equal(t, int64(0), etcdtest.KeyCount(t, cli, election.TermKey(term)), "no candidate key left")
	el, err := election.New(etcdtest.Session(t, cli), "panic")
	require.NoError(t, err)
	next, err := el.Campaign(ctx, "next")
	require.NoError(t, err, "another candidate is elected")
	assert.Greater(t, next.Epoch(), term.Epoch())
	require.NoError(t, next.Resign(ctx))
}
