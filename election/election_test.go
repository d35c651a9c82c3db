package election_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/election"
	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

func TestCampaignProclaimResign(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	el := newElection(t, etcdtest.Session(t, cli), "primary")
	ctx := etcdtest.Context(t)

	_, err := el.Leader(ctx)
	require.ErrorIs(t, err, election.ErrNoLeader)

	term, err := el.Campaign(ctx, "node-1")
	require.NoError(t, err)
	assert.NotZero(t, term.Epoch())
	assert.Equal(t, "primary", term.Token().Name)
	assert.Equal(t, term.Epoch(), term.Token().Seq)
	assert.Equal(t, "node-1", term.Value())
	assert.NoError(t, term.Err())
	assert.False(t, closed(term.Done()))

	l, err := el.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, election.Leader{Value: "node-1", Epoch: term.Epoch()}, l)

	require.NoError(t, term.Proclaim(ctx, "node-1:v2"))
	l, err = el.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, election.Leader{Value: "node-1:v2", Epoch: term.Epoch()}, l, "Proclaim keeps the epoch")
	assert.Equal(t, "node-1:v2", term.Value())

	// Proclaim keeps the key bound to the session's lease.
	resp, err := cli.Get(ctx, election.TermKey(term))
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	assert.NotZero(t, resp.Kvs[0].Lease, "Proclaim must not detach the key from its lease")

	// IsLeader holds while leading.
	txn, err := cli.Txn(ctx).If(term.IsLeader()).Then(clientv3.OpPut("guarded", "x")).Commit()
	require.NoError(t, err)
	assert.True(t, txn.Succeeded)

	require.NoError(t, term.Resign(ctx))
	require.NoError(t, term.Resign(ctx), "a second Resign is a no-op")
	assert.True(t, closed(term.Done()), "Done must be closed after Resign")
	assert.ErrorIs(t, term.Err(), election.ErrResigned)
	assert.ErrorIs(t, term.Proclaim(ctx, "late"), election.ErrResigned)
	_, err = el.Leader(ctx)
	assert.ErrorIs(t, err, election.ErrNoLeader)
	assert.Zero(t, etcdtest.KeyCount(t, cli, election.PrefixOf(el)))

	txn, err = cli.Txn(ctx).If(term.IsLeader()).Then(clientv3.OpPut("guarded", "y")).Commit()
	require.NoError(t, err)
	assert.False(t, txn.Succeeded, "IsLeader must fail after Resign")

	term2, err := el.Campaign(ctx, "node-2")
	require.NoError(t, err)
	assert.Greater(t, term2.Epoch(), term.Epoch(), "epochs strictly increase")
	require.NoError(t, term2.Resign(ctx))
}

// Three candidates, three observers: each time the leader's session ends
// the next candidate is elected with a strictly greater epoch, and every
// observer sees the same sequence of states.
func TestFailoverThreeCandidates(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t, etcdtest.WithMembers(3))
	cli, ocli := c.Client(t), c.Client(t)
	ctx := etcdtest.Context(t)
	const name = "failover"

	obsSession := etcdtest.Session(t, ocli)
	var observers []<-chan election.Leader
	for range 3 {
		observers = append(observers, newElection(t, obsSession, name).Observe(ctx))
	}
	seen := make([][]election.Leader, len(observers))
	expect := func(want election.Leader) {
		t.Helper()
		for i, ch := range observers {
			seen[i] = append(seen[i], receiveUntil(t, ctx, ch, want)...)
		}
	}
	expect(election.Leader{}) // no leader yet

	sessions := []*session.Session{etcdtest.Session(t, cli), etcdtest.Session(t, cli), etcdtest.Session(t, cli)}
	els := make([]*election.Election, 3)
	for i, s := range sessions {
		els[i] = newElection(t, s, name)
	}
	a, err := els[0].Campaign(ctx, "a")
	require.NoError(t, err)
	expect(election.Leader{Value: "a", Epoch: a.Epoch()})

	w := etcdtest.WatchPuts(t, cli, election.PrefixOf(els[0]))
	chB := campaignAsync(ctx, els[1], "b")
	etcdtest.WaitPuts(t, w, 1) // b is queued before c
	chC := campaignAsync(ctx, els[2], "c")
	etcdtest.WaitPuts(t, w, 1)

	require.NoError(t, a.Proclaim(ctx, "a2"))
	expect(election.Leader{Value: "a2", Epoch: a.Epoch()})

	// a's session ends (closed: the lease is revoked).
	aDone := a.Done()
	require.NoError(t, sessions[0].Close(ctx))
	rb := result(t, ctx, chB)
	require.NoError(t, rb.err)
	b := rb.term
	assert.Greater(t, b.Epoch(), a.Epoch())
	waitClosed(t, ctx, aDone, "a.Done")
	assert.ErrorIs(t, a.Err(), election.ErrLeadershipLost)
	assert.ErrorIs(t, a.Err(), session.ErrClosed)
	expect(election.Leader{Value: "b", Epoch: b.Epoch()})

	// b's lease ends on the server (revoked by someone else): its key goes.
	bDone := b.Done()
	_, err = cli.Revoke(ctx, sessions[1].Lease())
	require.NoError(t, err)
	rc := result(t, ctx, chC)
	require.NoError(t, rc.err)
	cterm := rc.term
	assert.Greater(t, cterm.Epoch(), b.Epoch())
	waitClosed(t, ctx, bDone, "b.Done")
	assert.ErrorIs(t, b.Err(), election.ErrLeadershipLost)
	expect(election.Leader{Value: "c", Epoch: cterm.Epoch()})

	require.NoError(t, cterm.Resign(ctx))
	expect(election.Leader{})

	want := []election.Leader{
		{},
		{Value: "a", Epoch: a.Epoch()},
		{Value: "a2", Epoch: a.Epoch()},
		{Value: "b", Epoch: b.Epoch()},
		{Value: "c", Epoch: cterm.Epoch()},
		{},
	}
	for i := range seen {
		assert.Equal(t, want, seen[i], "observer %d", i)
	}
}

// A leader cut off from etcd steps down (Term.Done closes) before the next
// candidate is elected; afterwards its Proclaim and Resign are rejected and
// leave the new leader's key alone.
func TestCutOffLeaderStepsDownFirst(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	c := etcdtest.New(t)
	cli := c.Client(t)
	pcli, p := c.ProxiedClient(t)
	ctx := etcdtest.Context(t)

	ls := etcdtest.Session(t, pcli, session.WithTTL(ttl))
	t.Cleanup(p.Unblackhole) // before the session's Close
	old, err := newElection(t, ls, "cutoff").Campaign(ctx, "old")
	require.NoError(t, err)
	oldDone := old.Done()

	standby := newElection(t, etcdtest.Session(t, cli, session.WithTTL(ttl)), "cutoff")
	w := etcdtest.WatchPuts(t, cli, election.PrefixOf(standby))
	ch := campaignAsync(ctx, standby, "new")
	etcdtest.WaitPuts(t, w, 1)

	p.Blackhole()
	r := result(t, ctx, ch)
	steppedDown := closed(oldDone) // at the moment the new leader is elected
	require.NoError(t, r.err)
	require.True(t, steppedDown, "the old leader's Term.Done must close before the new leader is elected")
	assert.Greater(t, r.term.Epoch(), old.Epoch())
	assert.ErrorIs(t, old.Err(), election.ErrLeadershipLost)
	assert.ErrorIs(t, old.Err(), session.ErrExpired)

	assertUntouched(t, cli, r.term, func() {
		assert.ErrorIs(t, old.Proclaim(ctx, "stale"), election.ErrLeadershipLost)
		assert.ErrorIs(t, old.Resign(ctx), election.ErrLeadershipLost)
	})
	l, err := standby.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, election.Leader{Value: "new", Epoch: r.term.Epoch()}, l)
}

// The old leader does not know yet that it lost (its lease was revoked on
// the server, its session has not noticed): Proclaim and Resign are guarded
// by its key's create revision and never touch the new leader's key.
func TestProclaimResignAfterLossAreGuarded(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	ls := etcdtest.Session(t, cli)
	old, err := newElection(t, ls, "guarded").Campaign(ctx, "old")
	require.NoError(t, err)
	standby := newElection(t, etcdtest.Session(t, cli), "guarded")
	w := etcdtest.WatchPuts(t, cli, election.PrefixOf(standby))
	ch := campaignAsync(ctx, standby, "new")
	etcdtest.WaitPuts(t, w, 1)

	_, err = cli.Revoke(ctx, ls.Lease())
	require.NoError(t, err)
	r := result(t, ctx, ch)
	require.NoError(t, r.err)

	assertUntouched(t, cli, r.term, func() {
		err := old.Proclaim(ctx, "stale")
		assert.ErrorIs(t, err, election.ErrLeadershipLost)
		assert.ErrorIs(t, old.Resign(ctx), election.ErrLeadershipLost)
		assert.ErrorIs(t, old.Proclaim(ctx, "stale again"), election.ErrLeadershipLost)
	})
	assert.True(t, closed(old.Done()))
	l, err := standby.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, election.Leader{Value: "new", Epoch: r.term.Epoch()}, l)
	require.NoError(t, r.term.Resign(ctx))
}

// assertUntouched runs fn and asserts that term's key was not written or
// deleted meanwhile.
func assertUntouched(t *testing.T, cli *clientv3.Client, term *election.Term, fn func()) {
	t.Helper()
	ctx := etcdtest.Context(t)
	before, err := cli.Get(ctx, election.TermKey(term))
	require.NoError(t, err)
	require.Len(t, before.Kvs, 1)
	fn()
	after, err := cli.Get(ctx, election.TermKey(term))
	require.NoError(t, err)
	require.Len(t, after.Kvs, 1, "the new leader's key was deleted")
	assert.Equal(t, before.Kvs[0].ModRevision, after.Kvs[0].ModRevision, "the new leader's key was written")
	assert.Equal(t, before.Kvs[0].Value, after.Kvs[0].Value)
}

func TestCampaignCancelledDeletesKey(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	holder, err := newElection(t, etcdtest.Session(t, cli), "cancel").Campaign(ctx, "h")
	require.NoError(t, err)
	el := newElection(t, etcdtest.Session(t, cli), "cancel")

	w := etcdtest.WatchPuts(t, cli, election.PrefixOf(el))
	cctx, cancel := context.WithCancel(ctx)
	ch := campaignAsync(cctx, el, "w")
	etcdtest.WaitPuts(t, w, 1)
	assert.Equal(t, int64(2), etcdtest.KeyCount(t, cli, election.PrefixOf(el)))
	cancel()
	r := result(t, ctx, ch)
	require.ErrorIs(t, r.err, context.Canceled)
	assert.Nil(t, r.term)
	assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, election.PrefixOf(el)), "a cancelled Campaign deletes its key")

	dctx, dcancel := context.WithDeadline(ctx, time.Now())
	defer dcancel()
	_, err = el.Campaign(dctx, "late")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, election.PrefixOf(el)))
	require.NoError(t, holder.Resign(ctx))
}

// If the session ends while campaigning, Campaign returns an error and
// never a Term.
func TestCampaignSessionEnds(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	holder, err := newElection(t, etcdtest.Session(t, cli), "sess").Campaign(ctx, "h")
	require.NoError(t, err)
	s := etcdtest.Session(t, cli)
	el := newElection(t, s, "sess")

	w := etcdtest.WatchPuts(t, cli, election.PrefixOf(el))
	ch := campaignAsync(ctx, el, "w")
	etcdtest.WaitPuts(t, w, 1)
	require.NoError(t, s.Close(ctx))
	r := result(t, ctx, ch)
	require.ErrorIs(t, r.err, election.ErrSessionDone)
	assert.ErrorIs(t, r.err, session.ErrClosed)
	assert.Nil(t, r.term)

	_, err = el.Campaign(ctx, "again")
	assert.ErrorIs(t, err, election.ErrSessionDone, "Campaign on an ended session")
	assert.Equal(t, int64(1), etcdtest.KeyCount(t, cli, election.PrefixOf(el)))
	require.NoError(t, holder.Resign(ctx))
}

// etcd #19597: a candidate whose key disappeared while it waited must not
// report leadership when its predecessors are gone.
func TestCampaignKeyDeletedWhileWaiting(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	holder, err := newElection(t, etcdtest.Session(t, cli), "gone").Campaign(ctx, "h")
	require.NoError(t, err)
	el := newElection(t, etcdtest.Session(t, cli), "gone")

	w := etcdtest.WatchPuts(t, cli, election.PrefixOf(el))
	ch := campaignAsync(ctx, el, "w")
	kv := nextPut(t, w)
	_, err = cli.Delete(ctx, string(kv.Key))
	require.NoError(t, err)
	require.NoError(t, holder.Resign(ctx))

	r := result(t, ctx, ch)
	require.ErrorIs(t, r.err, election.ErrKeyDeleted)
	assert.Nil(t, r.term)
	_, err = el.Leader(ctx)
	assert.ErrorIs(t, err, election.ErrNoLeader)
}

// Two candidates on one session are independent: the second waits.
func TestSameSessionCandidatesExclude(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	s := etcdtest.Session(t, cli)
	el1, el2 := newElection(t, s, "same"), newElection(t, s, "same")
	t1, err := el1.Campaign(ctx, "one")
	require.NoError(t, err)
	w := etcdtest.WatchPuts(t, cli, election.PrefixOf(el1))
	ch := campaignAsync(ctx, el2, "two")
	etcdtest.WaitPuts(t, w, 1)
	l, err := el2.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "one", l.Value, "the second candidate waits")
	require.NoError(t, t1.Resign(ctx))
	r := result(t, ctx, ch)
	require.NoError(t, r.err)
	assert.Greater(t, r.term.Epoch(), t1.Epoch())
	require.NoError(t, r.term.Resign(ctx))
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	s := etcdtest.Session(t, cli)

	_, err := election.New(nil, "x")
	assert.ErrorIs(t, err, election.ErrInvalidOption)
	assert.ErrorContains(t, err, "session is nil")

	for _, name := range []string{"", "a//b", "/a", "a/", "../x", "has space", "a/./b"} {
		_, err := election.New(s, name)
		assert.ErrorIs(t, err, election.ErrInvalidName, "name %q", name)
		assert.ErrorIs(t, err, lock.ErrInvalidName, "name %q", name)
		if err != nil {
			assert.Regexp(t, `^election: invalid name: `, err.Error())
		}
	}
	for _, prefix := range []string{"", "p/"} {
		_, err := election.New(s, "x", election.WithPrefix(prefix))
		assert.ErrorIs(t, err, election.ErrInvalidOption, "prefix %q", prefix)
		assert.ErrorContains(t, err, "prefix")
	}
	_, err = election.New(s, "x", nil)
	assert.ErrorIs(t, err, election.ErrInvalidOption)

	el, err := election.New(s, "jobs/v2.nightly", election.WithPrefix("custom"))
	require.NoError(t, err)
	assert.Equal(t, "custom/jobs%2Fv2.nightly/", election.PrefixOf(el))

	// One construction: New refuses what lock.New refuses, with lock's
	// message under its own package name.
	var nilSession *session.Session
	for what, in := range map[string]struct {
		src  session.Source
		name string
		lo   []lock.Option
		eo   []election.Option
	}{
		"nil source":    {nilSession, "x", nil, nil},
		"bad name":      {s, "a//b", nil, nil},
		"prefix with %": {s, "x", []lock.Option{lock.WithPrefix("a%b")}, []election.Option{election.WithPrefix("a%b")}},
		"prefix ends /": {s, "x", []lock.Option{lock.WithPrefix("a/")}, []election.Option{election.WithPrefix("a/")}},
		"a nil option":  {s, "x", []lock.Option{nil}, []election.Option{nil}},
	} {
		_, lerr := lock.New(in.src, in.name, in.lo...)
		_, eerr := election.New(in.src, in.name, in.eo...)
		if assert.Error(t, lerr, what) && assert.Error(t, eerr, what) {
			assert.Equal(t, strings.TrimPrefix(lerr.Error(), "lock: "), strings.TrimPrefix(eerr.Error(), "election: "), what)
			for _, sentinel := range []error{lock.ErrInvalidName, lock.ErrInvalidOption} {
				assert.Equal(t, errors.Is(lerr, sentinel), errors.Is(eerr, sentinel), "%s: %v", what, sentinel)
			}
		}
	}
}

// Nested names are separate elections (see lock's TestNestedNamesAreIndependent).
func TestNestedNamesAreIndependent(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	var terms []*election.Term
	for _, name := range []string{"a/b", "a"} {
		el, err := election.New(etcdtest.Session(t, cli), name)
		require.NoError(t, err)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		term, err := el.Campaign(cctx, "v")
		cancel()
		require.NoError(t, err, "%q must elect its own leader while the others lead", name)
		terms = append(terms, term)
	}
	for _, term := range terms {
		require.NoError(t, term.Resign(ctx))
	}
}
