package faults_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/contrib/httpfence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/integration/faults"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

// holderBin is the path of the child holder program, built by TestMain.
var holderBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "faults-holder-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
	holderBin = filepath.Join(dir, "holder")
	build := exec.Command("go", "build", "-o", holderBin, "./internal/holder")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "faults: build holder:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		return m.Run()
	}()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testTimeout bounds every scenario's waits.
const testTimeout = 90 * time.Second

func ctxFor(t testing.TB) context.Context { return etcdtest.ContextFor(t, testTimeout) }

// pkgPath is this package's import path, for replay lines.
const pkgPath = "github.com/dlock-go/dlock/integration/faults"

// seedFor returns the seed every random draw of t derives from (holds, a
// fault schedule): DLOCK_SEED if set, else the clock. It logs "seed=N"
// and the command that replays t with it, at once and again if t fails;
// env and flags are what else the command needs (the soak's settings).
func seedFor(t *testing.T, env, flags string) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("DLOCK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, "DLOCK_SEED must be an unsigned integer")
		seed = n
	}
	run := "^" + strings.Join(strings.Split(t.Name(), "/"), "$/^") + "$"
	replay := strings.Join(strings.Fields(fmt.Sprintf("DLOCK_SEED=%d %s go test -run '%s' -count=1 %s %s", seed, env, run, flags, pkgPath)), " ")
	t.Logf("seed=%d", seed)
	t.Logf("replay: %s", replay)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("FAILED with seed=%d; replay: %s", seed, replay)
		}
	})
	return seed
}

func newMutex(t testing.TB, s *session.Session, name string) *lock.Mutex {
	t.Helper()
	m, err := lock.New(s, name)
	require.NoError(t, err)
	return m
}

// queuePrefix returns the etcd key prefix of m's queue: its LockKey
// without "etcd:".
func queuePrefix(m *lock.Mutex) string { return strings.TrimPrefix(m.LockKey(), "etcd:") }

// waitEvents reads n events of type typ (and the keys they touch) from w.
func waitEvents(t testing.TB, ctx context.Context, w clientv3.WatchChan, typ mvccpb.Event_EventType, n int) []string {
	t.Helper()
	var keys []string
	for len(keys) < n {
		select {
		case wr, ok := <-w:
			require.True(t, ok, "watch closed")
			require.NoError(t, wr.Err())
			for _, ev := range wr.Events {
				if ev.Type == typ {
					keys = append(keys, string(ev.Kv.Key))
				}
			}
		case <-ctx.Done():
			t.Fatalf("waiting for %d %v events (got %d): %v", n, typ, len(keys), ctx.Err())
		}
	}
	return keys
}

// child is a holder process (internal/holder).
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	exit  chan struct{}
}

// startChild starts the holder with args; it is killed at cleanup.
func startChild(t testing.TB, args ...string) *child {
	t.Helper()
	cmd := exec.Command(holderBin, args...)
	cmd.Stderr = &testWriter{t: t}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 16), exit: make(chan struct{})}
	go func() {
		defer close(c.exit)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		cmd.Wait() // only after all reads from the pipe
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		for range c.lines {
		}
		<-c.exit
	})
	return c
}

// line returns the child's next stdout line.
func (c *child) line(t testing.TB, ctx context.Context) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		require.True(t, ok, "holder exited without output")
		return l
	case <-ctx.Done():
		t.Fatalf("waiting for the holder's output: %v", ctx.Err())
		return ""
	}
}

func (c *child) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(sig))
}

// proceed tells the child to go on (write, or check and write).
func (c *child) proceed(t testing.TB) {
	t.Helper()
	_, err := io.WriteString(c.stdin, "go\n")
	require.NoError(t, err)
}

type testWriter struct {
	mu sync.Mutex
	t  testing.TB
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Logf("holder: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// resource is the protected resource: a register behind an HTTP endpoint,
// optionally fenced by a MemoryGuard. It records every write and read in a
// porcupine history of the FencedRegister model.
type resource struct {
	guarded bool
	guard   *fence.MemoryGuard
	hist    *faults.History
	srv     *httptest.Server

	mu    sync.Mutex
	value string
}

func newResource(t testing.TB, guarded bool, hist *faults.History) *resource {
	t.Helper()
	r := &resource{guarded: guarded, guard: fence.NewMemoryGuard(), hist: hist}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// URL returns the write endpoint. The client id of a write is its
// "client" query parameter.
func (r *resource) URL(client int) string { return fmt.Sprintf("%s/?client=%d", r.srv.URL, client) }

func (r *resource) serve(w http.ResponseWriter, req *http.Request) {
	call := r.hist.Now()
	var client int
	fmt.Sscan(req.URL.Query().Get("client"), &client)
	tok, err := httpfence.FromHeader(req.Header)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	body, _ := io.ReadAll(req.Body)
	admitted := r.write(tok, string(body))
	r.hist.Add(client, call, faults.RegisterInput{Token: tok.Seq, Value: string(body)}, faults.RegisterOutput{Admitted: admitted}, r.hist.Now())
	if !admitted {
		http.Error(w, "stale token", http.StatusConflict)
	}
}

// write applies a write; with the guard, the check and the write are atomic.
func (r *resource) write(tok fence.Token, v string) bool {
	set := func() error { r.mu.Lock(); r.value = v; r.mu.Unlock(); return nil }
	if !r.guarded {
		set()
		return true
	}
	return r.guard.Do(tok, set) == nil
}

// post writes v with tok over HTTP, as client.
func (r *resource) post(t testing.TB, ctx context.Context, client int, tok fence.Token, v string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL(client), strings.NewReader(v))
	require.NoError(t, err)
	require.NoError(t, httpfence.SetHeader(req.Header, tok))
	resp, err := r.srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// read reads the register, recorded as client.
func (r *resource) read(client int) string {
	call := r.hist.Now()
	r.mu.Lock()
	v := r.value
	r.mu.Unlock()
	r.hist.Add(client, call, faults.RegisterInput{Read: true}, faults.RegisterOutput{Value: v}, r.hist.Now())
	return v
}
