package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/lock"
)

// waiters runs acquires that wait, one after the other in queue order
// (each is queued, seen by a watch on prefix, before the next starts), and
// stops them when the test ends.
type waiters struct {
	t      *testing.T
	cli    *clientv3.Client
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newWaiters(t *testing.T, cli *clientv3.Client) *waiters {
	ctx, cancel := context.WithCancel(etcdtest.Context(t))
	w := &waiters{t: t, cli: cli, ctx: ctx, cancel: cancel}
	t.Cleanup(func() { cancel(); w.wg.Wait() })
	return w
}

// queue starts acquire and returns once its key is under prefix.
func (w *waiters) queue(prefix string, acquire func(context.Context) (lock.Held, error)) {
	w.t.Helper()
	puts := etcdtest.WatchPuts(w.t, w.cli, prefix)
	w.wg.Go(func() {
		if h, err := acquire(w.ctx); err == nil {
			h.Unlock(context.WithoutCancel(w.ctx))
		}
	})
	etcdtest.WaitPuts(w.t, puts, 1)
}

// TestInspectKinds: inspect tells permits, readers and writers apart, and
// which of them hold and which wait.
func TestInspectKinds(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	ep := c.Endpoints()[0]
	w := newWaiters(t, cli)
	inspectJSON := func(name string) inspectResult {
		t.Helper()
		r := runCLI(t, "inspect", "--json", "--endpoints", ep, name)
		require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
		var res inspectResult
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stdout)
		return res
	}
	type row struct{ state, kind, owner string }
	rows := func(res inspectResult) []row {
		var out []row
		for _, en := range append(res.Holders, res.Waiting...) {
			out = append(out, row{en.State, en.Kind, en.Owner})
		}
		return out
	}

	// A semaphore of 2 permits: two hold, one waits.
	for _, owner := range []string{"p1", "p2"} {
		sem, err := lock.NewSemaphore(etcdtest.Session(t, cli), "pool", 2, lock.WithOwner(owner))
		require.NoError(t, err)
		_, err = sem.Acquire(ctx)
		require.NoError(t, err)
	}
	sem, err := lock.NewSemaphore(etcdtest.Session(t, cli), "pool", 2, lock.WithOwner("p3"))
	require.NoError(t, err)
	w.queue(lock.DefaultPrefix+"/pool/", sem.Acquire)
	res := inspectJSON("pool")
	assert.Equal(t, []row{{"holder", "permit", "p1"}, {"holder", "permit", "p2"}, {"waiting", "permit", "p3"}}, rows(res))
	require.NotNil(t, res.Holder)
	assert.Equal(t, "p1", res.Holder.Owner, "holder is the first holder")
	for _, en := range append(res.Holders, res.Waiting...) {
		assert.Equal(t, 2, en.Permits)
	}
	r := runCLI(t, "inspect", "--endpoints", ep, "pool")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	for _, want := range []string{"2 holding, 1 waiting (semaphore of 2 permits)", "KIND", "waiting #2  permit"} {
		assert.Contains(t, r.stdout, want)
	}
	assert.NotContains(t, r.stdout, "permits=", "the owner is shown without the stored permits")

	// An RWMutex: a reader holds, a writer waits for it, a reader after
	// the writer waits for the writer.
	newRW := func(owner string) *lock.RWMutex {
		rw, err := lock.NewRWMutex(etcdtest.Session(t, cli), "cfg", lock.WithOwner(owner))
		require.NoError(t, err)
		return rw
	}
	_, err = newRW("r1").RLock(ctx)
	require.NoError(t, err)
	wr := newRW("w2")
	w.queue(lock.DefaultPrefix+"/cfg/", wr.Lock)
	r3 := newRW("r3")
	w.queue(lock.DefaultPrefix+"/cfg/", r3.RLock)
	res = inspectJSON("cfg")
	assert.Equal(t, []row{{"holder", "read", "r1"}, {"waiting", "write", "w2"}, {"waiting", "read", "r3"}}, rows(res))
	r = runCLI(t, "inspect", "--endpoints", ep, "cfg")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.Contains(t, r.stdout, "1 holding, 2 waiting\n")
	assert.Regexp(t, `holder\s+read\s+cfg:\d+\s+r1`, r.stdout)
	assert.Regexp(t, `waiting #1\s+write\s+cfg:\d+\s+w2`, r.stdout)
	assert.Regexp(t, `waiting #2\s+read\s+cfg:\d+\s+r3`, r.stdout)

	// A Mutex's queue keeps the plain table.
	m, err := lock.New(etcdtest.Session(t, cli), "plain", lock.WithOwner("m1"))
	require.NoError(t, err)
	_, err = m.Lock(ctx)
	require.NoError(t, err)
	res = inspectJSON("plain")
	assert.Equal(t, []row{{"holder", "write", "m1"}}, rows(res))
	r = runCLI(t, "inspect", "--endpoints", ep, "plain")
	require.Equal(t, 0, r.code, "stderr: %s", r.stderr)
	assert.NotContains(t, r.stdout, "KIND")
	assert.Regexp(t, `holder\s+plain:\d+\s+m1`, r.stdout)
}

// syncBuffer is an output stream that tells when it is written to.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // closed at the next write
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{written: make(chan struct{})} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.written)
	b.written = make(chan struct{})
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitFor waits, within cmdTimeout, until the output from offset from on
// has a complete block (see blockLen) for which match is true, and returns
// the offset after that block.
func (b *syncBuffer) waitFor(t *testing.T, from int, what string, match func(block string) bool) int {
	t.Helper()
	timeout := time.NewTimer(cmdTimeout)
	defer timeout.Stop()
	for {
		b.mu.Lock()
		out, written := b.b.String(), b.written
		b.mu.Unlock()
		for at := from; ; {
			n := blockLen(out[at:])
			if n == 0 {
				break
			}
			if match(out[at : at+n]) {
				return at + n
			}
			at += n
		}
		select {
		case <-written:
		case <-timeout.C:
			require.FailNow(t, "inspect --watch did not show "+what, "output:\n%s", out)
		}
	}
}

// blockLen returns the length of the first complete block of inspect's
// output in s, up to the end of the line that ends it ("nobody waits", or
// the table's footer); 0 if there is none yet.
func blockLen(s string) int {
	n := 0
	for _, end := range []string{"nobody waits\n", "heartbeats arrive)\n"} {
		if i := strings.Index(s, end); i >= 0 && (n == 0 || i+len(end) < n) {
			n = i + len(end)
		}
	}
	return n
}

// TestInspectWatch runs inspect --watch in the process, on a pipe-like
// (non-terminal) output: each change of the queue is one block after a
// timestamp line; a holder, its release and the next holder show in that
// order; and it returns nil when its ctx ends.
func TestInspectWatch(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	cli := c.Client(t)
	ctx := etcdtest.Context(t)
	out, errOut := newSyncBuffer(), newSyncBuffer()
	e := &env{stdout: out, stderr: errOut, getenv: func(string) string { return "" }}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- runInspect(wctx, e, []string{"--watch", "--endpoints", c.Endpoints()[0], "jobs"}) }()

	holds := func(owner string) func(string) bool {
		return func(block string) bool {
			for _, l := range strings.Split(block, "\n") {
				if strings.HasPrefix(l, "holder ") && strings.Contains(l, " "+owner+" ") {
					return true
				}
			}
			return false
		}
	}
	nobody := func(block string) bool { return strings.Contains(block, "nobody holds it") }
	at := out.waitFor(t, 0, "the empty queue", nobody)

	newMutex := func(owner string) *lock.Mutex {
		m, err := lock.New(etcdtest.Session(t, cli), "jobs", lock.WithOwner(owner))
		require.NoError(t, err)
		return m
	}
	h1, err := newMutex("holder-1").Lock(ctx)
	require.NoError(t, err)
	at = out.waitFor(t, at, "holder-1", holds("holder-1"))
	require.NoError(t, h1.Unlock(ctx))
	at = out.waitFor(t, at, "the release", nobody)
	h2, err := newMutex("holder-2").Lock(ctx)
	require.NoError(t, err)
	out.waitFor(t, at, "holder-2", holds("holder-2"))
	require.NoError(t, h2.Unlock(ctx))
	t.Logf("inspect --watch:\n%s", out)

	stop()
	select {
	case err := <-done:
		assert.NoError(t, err, "stderr: %s", errOut)
	case <-time.After(cmdTimeout):
		require.FailNow(t, "inspect --watch did not end with its ctx")
	}

	text := out.String()
	assert.NotContains(t, text, "\x1b[", "no terminal codes on a pipe")
	blocks := strings.Split(text, "--- ")
	require.Greater(t, len(blocks), 3, text)
	assert.Empty(t, blocks[0], "the output starts with a timestamp line")
	for _, b := range blocks[1:] {
		stamp, _, ok := strings.Cut(b, " (etcd revision ")
		require.True(t, ok, "block %q", b)
		_, err := time.Parse(time.RFC3339Nano, stamp)
		assert.NoError(t, err, "timestamp line of block %q", b)
		assert.Contains(t, b, `lock "jobs"`)
	}
}

// TestInspectWatchJSON: with --json, --watch prints one JSON document per
// line per change, and nothing else.
func TestInspectWatchJSON(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	ctx := etcdtest.Context(t)
	out := newSyncBuffer()
	e := &env{stdout: out, stderr: newSyncBuffer(), getenv: func(string) string { return "" }}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- runInspect(wctx, e, []string{"jobs", "--watch", "--json", "--endpoints", c.Endpoints()[0]})
	}()
	// waitDoc waits for a complete line that is a document matching match.
	waitDoc := func(what string, match func(inspectResult) bool) {
		t.Helper()
		timeout := time.NewTimer(cmdTimeout)
		defer timeout.Stop()
		for {
			out.mu.Lock()
			text, written := out.b.String(), out.written
			out.mu.Unlock()
			lines := strings.Split(text, "\n")
			for _, l := range lines[:len(lines)-1] { // the last is not complete
				var r inspectResult
				require.NoError(t, json.Unmarshal([]byte(l), &r), "line %q", l)
				if match(r) {
					return
				}
			}
			select {
			case <-written:
			case <-timeout.C:
				require.FailNow(t, "no document with "+what, "output:\n%s", text)
			}
		}
	}
	waitDoc("nobody", func(r inspectResult) bool { return r.Holder == nil })
	m, err := lock.New(etcdtest.Session(t, c.Client(t)), "jobs", lock.WithOwner("j1"))
	require.NoError(t, err)
	h, err := m.Lock(ctx)
	require.NoError(t, err)
	waitDoc("holder j1", func(r inspectResult) bool { return r.Holder != nil && r.Holder.Owner == "j1" })
	require.NoError(t, h.Unlock(ctx))
	stop()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(cmdTimeout):
		require.FailNow(t, "inspect --watch did not end with its ctx")
	}
}

// TestInspectWatchInterrupt: the binary's inspect --watch ends with exit
// code 0 on SIGINT.
func TestInspectWatchInterrupt(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	p := start(t, "inspect", "--watch", "--endpoints", c.Endpoints()[0], "jobs")
	p.waitLine(t, "--- ")
	p.waitLine(t, "nobody holds it")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	code, _ := p.wait(t, 15*time.Second)
	assert.Equal(t, 0, code, "stderr: %s", p.stderr)
	assert.Empty(t, p.stderr.String())
}

// The value of a semaphore's key, as lock.Semaphore stores it
// (lock/semaphore_test.go pins that layout), and values that are not one.
func TestSemaphoreValue(t *testing.T) {
	n, owner, ok := semaphoreValue([]byte("permits=3 worker-7"))
	assert.True(t, ok)
	assert.Equal(t, 3, n)
	assert.Equal(t, "worker-7", owner)
	for _, v := range []string{"", "owner", "permits=x o", "permits=0 o", "permits=-1 o", "permit=3 o"} {
		_, _, ok := semaphoreValue([]byte(v))
		assert.False(t, ok, v)
	}
}
