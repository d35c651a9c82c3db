package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/contrib/cmd/dlock/internal/capacity"
	"go.uber.org/goleak"
)

// bin is the dlock binary built by TestMain.
var bin string

// buildFlags are passed to "go build" for the binary under test.
var buildFlags []string

// cmdTimeout bounds every run of the binary.
const cmdTimeout = 60 * time.Second

func TestMain(m *testing.M) {
	if capacity.IsWorker() { // this test binary re-executed as a capacity worker
		os.Exit(capacity.WorkerMain())
	}
	goleak.VerifyTestMain(buildFirst{m})
}

// buildFirst builds the binary before the tests run and removes it after.
type buildFirst struct{ m *testing.M }

func (b buildFirst) Run() int {
	dir, err := os.MkdirTemp("", "dlock-cli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin = filepath.Join(dir, "dlock")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", append(append([]string{"build"}, buildFlags...), "-o", bin, ".")...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		return 1
	}
	return b.m.Run()
}

// result is a finished run of the binary.
type result struct {
	stdout, stderr string
	code           int
	elapsed        time.Duration
}

// runCLI runs the binary with args to completion, within cmdTimeout.
func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	return runCLIEnv(t, nil, args...)
}

// runCLIEnv is runCLI with env ("KEY=value") added to the environment.
func runCLIEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = environ(env)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	require.NoError(t, ctx.Err(), "dlock %v did not finish within %v; stderr: %s", args, cmdTimeout, r.stderr)
	if err != nil {
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "dlock %v", args)
	}
	r.code = cmd.ProcessState.ExitCode()
	return r
}

// environ is the test's environment without $DLOCK_DSN (so that a DSN
// set where the tests run cannot reach the binary), plus env.
func environ(env []string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envDSN+"=") {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// proc is a running dlock whose stdout and stderr are read line by line.
type proc struct {
	cmd      *exec.Cmd
	lines    chan string   // stdout lines; closed at EOF
	errLines chan string   // stderr lines (the first 100); closed at EOF
	stderr   *lockedBuffer // all of stderr
	waited   chan struct{}
	err      error
}

// start starts the binary with args; it is killed at the latest when the
// test ends or cmdTimeout passes.
func start(t *testing.T, args ...string) *proc {
	t.Helper()
	return startEnv(t, nil, args...)
}

// startEnv is start with env ("KEY=value") added to the environment.
func startEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startAttr(t, env, nil, args...)
}

// startAttr is startEnv with attr for the process (nil: none).
func startAttr(t *testing.T, env []string, attr *syscall.SysProcAttr, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), cmdTimeout)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = environ(env)
	cmd.SysProcAttr = attr
	p := &proc{cmd: cmd, lines: make(chan string, 100), errLines: make(chan string, 100), stderr: &lockedBuffer{}, waited: make(chan struct{})}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	errOut, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var reads sync.WaitGroup
	reads.Go(func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	})
	reads.Go(func() {
		sc := bufio.NewScanner(errOut)
		for sc.Scan() {
			p.stderr.Write([]byte(sc.Text() + "\n"))
			select {
			case p.errLines <- sc.Text():
			default: // nobody reads them: keep the buffer's first lines
			}
		}
		close(p.errLines)
	})
	go func() {
		reads.Wait() // Wait closes the pipes: read them to the end first
		p.err = cmd.Wait()
		cancel()
		close(p.waited)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.waited
	})
	return p
}

// waitLine returns the first stdout line containing substr, failing the
// test if the process ends or cmdTimeout passes first.
func (p *proc) waitLine(t *testing.T, substr string) string {
	t.Helper()
	return p.waitIn(t, p.lines, "stdout", substr)
}

// waitErrLine returns the first stderr line containing substr, failing the
// test if stderr ends or cmdTimeout passes first.
func (p *proc) waitErrLine(t *testing.T, substr string) string {
	t.Helper()
	return p.waitIn(t, p.errLines, "stderr", substr)
}

// waitIn returns the first line of lines, p's stream called stream, that
// contains substr.
func (p *proc) waitIn(t *testing.T, lines <-chan string, stream, substr string) string {
	t.Helper()
	timeout := time.NewTimer(cmdTimeout)
	defer timeout.Stop()
	for {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "dlock's %s ended before a line with %q; stderr: %s", stream, substr, p.stderr)
			if strings.Contains(l, substr) {
				return l
			}
		case <-timeout.C:
			require.FailNow(t, "no "+stream+" line with "+substr, "stderr: %s", p.stderr)
		}
	}
}

// wait waits for the process to exit and returns its exit code and the
// remaining stdout.
func (p *proc) wait(t *testing.T, within time.Duration) (int, string) {
	t.Helper()
	var rest strings.Builder
	timeout := time.NewTimer(within)
	defer timeout.Stop()
	for lines := p.lines; lines != nil; {
		select {
		case l, ok := <-lines:
			if !ok {
				lines = nil
				continue
			}
			rest.WriteString(l + "\n")
		case <-timeout.C:
			require.FailNow(t, "dlock did not exit", "within %v; stderr: %s", within, p.stderr)
		}
	}
	select {
	case <-p.waited:
	case <-timeout.C:
		require.FailNow(t, "dlock did not exit", "within %v; stderr: %s", within, p.stderr)
	}
	return p.cmd.ProcessState.ExitCode(), rest.String()
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// oneLineErr asserts that stderr is exactly one line starting with
// "dlock", besides the notes of a run that waited (see waitNotes).
func oneLineErr(t *testing.T, stderr string) {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(stderr, "\n"), "\n") {
		if !isWaitNote(l) {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 1, "stderr: %q", stderr)
	require.True(t, strings.HasPrefix(lines[0], "dlock"), "stderr: %q", stderr)
}

// isWaitNote reports whether l is a waiting run's note.
func isWaitNote(l string) bool {
	return strings.HasPrefix(l, "dlock run: waiting for ") || strings.HasPrefix(l, "dlock run: still waiting for ")
}

// trapTERM returns a shell script for a child that prints "ready" and waits
// until SIGTERM, then prints "got TERM" and exits with code. The trap also
// SIGKILLs the background sleep: a SIGTERM that reaches it between fork and
// exec is swallowed by the handler it inherited from the shell, and a
// surviving sleep would hold dlock's stdout open for a minute.
func trapTERM(code int) string {
	return fmt.Sprintf(`trap 'echo got TERM; kill -9 $! 2>/dev/null; exit %d' TERM; sleep 60 & echo ready; wait`, code)
}

// hostPort strips the scheme from an etcdtest endpoint.
func hostPort(ep string) string { return strings.TrimPrefix(ep, "http://") }
