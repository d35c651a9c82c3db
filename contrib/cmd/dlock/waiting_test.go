package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

// TestRunSaysItWaits: a run that must wait says so on stderr, once, with
// the holder's owner and token (etcd) or without them (Redis), on every
// kind of lock; it is granted when the holder stops.
func TestRunSaysItWaits(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	etcd := []string{"--endpoints", c.Endpoints()[0]}
	rs := redistest.Start(t)
	redis := []string{"--dsn", "redis://" + rs.Addr()}
	for _, tc := range []struct {
		name           string
		holder, waiter []string
		want           func(holder fence.Token) string
	}{
		{"lock", append([]string{"--lock", "w/lock", "--owner", "holder-1"}, etcd...), append([]string{"--lock", "w/lock"}, etcd...),
			func(h fence.Token) string {
				return fmt.Sprintf(`dlock run: waiting for lock "w/lock": held by holder-1 (token %d)`, h.Seq)
			}},
		{"permit", append([]string{"--lock", "w/pool", "--permits", "1", "--owner", "holder-1"}, etcd...), append([]string{"--lock", "w/pool", "--permits", "1"}, etcd...),
			func(h fence.Token) string {
				return fmt.Sprintf(`dlock run: waiting for a permit of "w/pool" (1 permit): held by holder-1 (token %d)`, h.Seq)
			}},
		{"reader behind a writer", append([]string{"--lock", "w/rw1", "--rw", "--owner", "writer-1"}, etcd...), append([]string{"--lock", "w/rw1", "--shared"}, etcd...),
			func(h fence.Token) string {
				return fmt.Sprintf(`dlock run: waiting for lock "w/rw1" (shared): held by writer-1 (token %d)`, h.Seq)
			}},
		{"writer behind a reader", append([]string{"--lock", "w/rw2", "--shared", "--owner", "reader-1"}, etcd...), append([]string{"--lock", "w/rw2", "--rw"}, etcd...),
			func(h fence.Token) string {
				return fmt.Sprintf(`dlock run: waiting for lock "w/rw2": held by reader-1 (token %d, shared)`, h.Seq)
			}},
		{"redis", append([]string{"--lock", "w/redis"}, redis...), append([]string{"--lock", "w/redis"}, redis...),
			func(fence.Token) string { return `dlock run: waiting for lock "w/redis": held by another client` }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			holder, tok := holdingRun(t, tc.holder...)
			waiter := start(t, append(append([]string{"run"}, tc.waiter...), "--", "echo", "granted")...)
			note := waiter.waitErrLine(t, "waiting for")
			assert.Equal(t, tc.want(tok), note)
			t.Logf("the waiting run's stderr: %s", note)

			stop(t, holder)
			waiter.waitLine(t, "granted")
			code, _ := waiter.wait(t, 15*time.Second)
			assert.Equal(t, 0, code, "stderr: %s", waiter.stderr)
			assert.Equal(t, note+"\n", waiter.stderr.String(), "one note, nothing else")
		})
	}
}

// TestWaitNotes: the notes name the holder and how many wait ahead, and
// a later note names the next holder; this run's own entry is not counted.
func TestWaitNotes(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := t.Context()
	mutex := func(owner string) (*lock.Mutex, *session.Session) {
		s, err := session.New(ctx, cli)
		require.NoError(t, err)
		t.Cleanup(func() { s.Close(context.Background()) })
		m, err := lock.New(s, "notes", lock.WithOwner(owner))
		require.NoError(t, err)
		return m, s
	}
	a, _ := mutex("A")
	b, _ := mutex("B")
	self, selfSession := mutex("self")
	ha, err := a.Lock(ctx)
	require.NoError(t, err)

	// B, then self, queue behind A; a watch tells when each key exists.
	w := cli.Watch(ctx, a.Prefix(), clientv3.WithPrefix(), clientv3.WithRev(int64(ha.Token().Seq)+1))
	queued := func(who string) {
		t.Helper()
		select {
		case ev := <-w:
			require.NoError(t, ev.Err())
			require.NotEmpty(t, ev.Events, who)
		case <-time.After(cmdTimeout):
			require.FailNow(t, who+" did not queue")
		}
	}
	type grant struct {
		h   lock.Held
		err error
	}
	lctx, cancel := context.WithCancel(ctx)
	bGranted, selfGranted := make(chan grant, 1), make(chan grant, 1)
	go func() { h, err := b.Lock(lctx); bGranted <- grant{h, err} }()
	queued("B")
	go func() { h, err := self.Lock(lctx); selfGranted <- grant{h, err} }()
	queued("self")
	t.Cleanup(func() { cancel(); <-bGranted; <-selfGranted })

	lines := make(lineWriter, 100)
	n := waitNotes{
		w: lines, what: `lock "notes"`, every: 50 * time.Millisecond,
		queue: &inspector{cli: cli, name: "notes", keys: queueKeys{prefix: a.Prefix(), readerPrefix: a.Prefix() + "r/"}},
		self:  func(context.Context) int64 { return int64(selfSession.Lease()) },
	}
	stopNotes := n.start(ctx)
	defer stopNotes()
	assert.Equal(t, fmt.Sprintf(`dlock run: waiting for lock "notes": held by A (token %d); 1 waiting ahead`, ha.Token().Seq), lines.next(t))

	require.NoError(t, ha.Unlock(ctx))
	var gb grant
	select {
	case gb = <-bGranted:
		require.NoError(t, gb.err)
	case <-time.After(cmdTimeout):
		require.FailNow(t, "B was not granted")
	}
	bGranted <- gb // for the cleanup
	for {
		l := lines.next(t)
		if strings.Contains(l, "held by B") {
			assert.Regexp(t, fmt.Sprintf(`^dlock run: still waiting for lock "notes" after \S+: held by B \(token %d\)$`, gb.h.Token().Seq), l)
			break
		}
		assert.Contains(t, l, "held by A", "a note names the holder of its moment")
	}
	stopNotes()
	select {
	case l := <-lines:
		assert.NotContains(t, l, "held by B", "nothing is printed after stop: %q", l)
	default:
	}
}

// lineWriter sends each write, a line, to its channel; a full channel
// drops it.
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) {
	select {
	case w <- strings.TrimSuffix(string(p), "\n"):
	default:
	}
	return len(p), nil
}

// next returns the next line, failing the test after cmdTimeout.
func (w lineWriter) next(t *testing.T) string {
	t.Helper()
	select {
	case l := <-w:
		return l
	case <-time.After(cmdTimeout):
		require.FailNow(t, "no note")
		return ""
	}
}

func TestBehind(t *testing.T) {
	entry := func(pos int, owner, state string, lease int64) inspectEntry {
		return inspectEntry{Position: pos, Key: fmt.Sprintf("k%d", pos), Seq: int64(10 + pos), Owner: owner, State: state, lease: lease, Kind: kindPermitName}
	}
	queue := func(ens ...inspectEntry) inspectResult {
		var r inspectResult
		for _, en := range ens {
			if en.State == stateHolder {
				r.Holders = append(r.Holders, en)
			} else {
				r.Waiting = append(r.Waiting, en)
			}
		}
		return r
	}
	five := queue(
		entry(0, "p0", stateHolder, 1), entry(1, "p1", stateHolder, 2), entry(2, "", stateHolder, 3),
		entry(3, "p3", stateHolder, 4), entry(4, "p4", stateHolder, 5), entry(5, "w5", stateWaiting, 6),
		entry(6, "self", stateWaiting, 7), entry(7, "w7", stateWaiting, 8),
	)
	assert.Equal(t, "held by p0 (token 10), p1 (token 11), k2 (token 12) and 2 more; 1 waiting ahead", behind(five, 7),
		"at most 3 holders named (a key for a blank owner); who waits behind self is not counted")
	assert.Equal(t, "held by p0 (token 10), p1 (token 11), k2 (token 12) and 2 more; 3 waiting ahead", behind(five, 0),
		"self not queued yet: every waiter is ahead")
	assert.Empty(t, behind(queue(entry(0, "self", stateHolder, 7), entry(1, "w", stateWaiting, 8)), 7), "self holds: no note")
	assert.Empty(t, behind(queue(entry(0, "self", stateWaiting, 7)), 7), "nobody before self: no note")
	assert.Empty(t, behind(queue(), 7))
	assert.Equal(t, "nobody holds it; 1 waiting ahead", behind(queue(entry(0, "w", stateWaiting, 1), entry(1, "self", stateWaiting, 7)), 7))
}
