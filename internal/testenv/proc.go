package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// Proc is a server process a test helper started (pgtest's PostgreSQL,
// s3test's versitygw): its output goes to a log file, and it is waited for
// by one goroutine, which ends when the process does. Its methods are safe
// for concurrent use.
type Proc struct {
	name    string // for messages: "postgres"
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd.Wait returns
	waitErr error         // valid after exited is closed

	stopOnce sync.Once
	stopErr  error
}

// StartProc starts cmd with its stdout and stderr appended to logPath. name
// is the server's name in messages. The caller must Stop or Kill it.
func StartProc(name string, cmd *exec.Cmd, logPath string) (*Proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()                  // the child keeps its own descriptor
	cmd.Stdout, cmd.Stderr = logf, logf // *os.File: no copying goroutine
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// WaitReady calls ready every interval until it returns nil, the process
// exits, or ctx ends; on failure it kills the process and says why, with
// the tail of its log.
func (p *Proc) WaitReady(ctx context.Context, interval time.Duration, ready func(context.Context) error) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			err = fmt.Errorf("%s exited during startup: %v", p.name, p.waitErr)
		case <-ctx.Done():
			err = fmt.Errorf("%s not ready: %w (last error: %v)", p.name, ctx.Err(), err)
		case <-tick.C:
			continue
		}
		p.Kill()
		return fmt.Errorf("%w\n%s", err, p.LogTail())
	}
}

// Stop sends sig (a graceful shutdown) and kills the process if it has not
// exited within timeout. It is idempotent; the error says whether it had to
// kill.
func (p *Proc) Stop(sig os.Signal, timeout time.Duration) error {
	p.stopOnce.Do(func() {
		_ = p.cmd.Process.Signal(sig)
		select {
		case <-p.exited:
		case <-time.After(timeout):
			p.stopErr = fmt.Errorf("%s did not stop within %v; killed", p.name, timeout)
			p.Kill()
		}
	})
	return p.stopErr
}

// Kill kills the process (SIGKILL) and waits until it has exited.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// LogTail returns the last 4 KiB of the process's log, headed with its
// name, or "" if the log cannot be read.
func (p *Proc) LogTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	const max = 4 << 10
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return p.name + " log (tail):\n" + string(b)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// Someone else may take it before the caller binds it: see Launch.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Launch calls launch with a free port until it succeeds, three times at
// most (a free port can be taken by someone else before the server binds
// it), or until ctx ends.
func Launch[S any](ctx context.Context, launch func(port int) (S, error)) (S, error) {
	var zero S
	var errs []error
	for range 3 {
		port, err := FreePort()
		if err != nil {
			return zero, err
		}
		s, err := launch(port)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return zero, errs[len(errs)-1]
}

// StartFor starts a server for tb alone with start and stops it with
// tb.Cleanup. A failure to start ends tb (see StartFailed).
func StartFor[S interface{ Stop() error }](tb testing.TB, what string, notInstalled error, start func(context.Context) (S, error)) S {
	tb.Helper()
	s, err := start(tb.Context())
	if err != nil {
		StartFailed(tb, what, notInstalled, err)
	}
	tb.Cleanup(func() {
		if err := s.Stop(); err != nil {
			tb.Errorf("stop %s: %v", what, err)
		}
	})
	return s
}

// StartFailed ends tb because the server named what did not start with
// err: when err matches notInstalled (its binaries cannot be had) as
// Missing does, otherwise as a failure.
func StartFailed(tb testing.TB, what string, notInstalled, err error) {
	tb.Helper()
	if errors.Is(err, notInstalled) {
		Missing(tb, what, err.Error())
	}
	tb.Fatalf("start %s: %v", what, err)
}
