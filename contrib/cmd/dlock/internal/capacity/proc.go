package capacity

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"time"
)

// proc is one worker process, seen from the driver.
type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser

	mu      sync.Mutex
	next    int
	pending map[int]chan reply
	exited  chan struct{} // closed once the reader saw stdout end
	waited  chan struct{} // closed once the process was reaped
	stderr  *tailBuffer
}

// tailBuffer keeps the last few KB written to it (a worker's stderr).
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if n := len(t.buf); n > 4096 {
		t.buf = t.buf[n-4096:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// startProc starts a worker process: cmd if given, else this executable
// with WorkerEnv set.
func startProc(newCmd func() *exec.Cmd) (*proc, error) {
	var cmd *exec.Cmd
	if newCmd != nil {
		cmd = newCmd()
	} else {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("capacity: worker: %w", err)
		}
		cmd = exec.Command(exe)
	}
	cmd.Env = append(cmd.Environ(), WorkerEnv+"=1")
	dieWithParent(cmd)
	p := &proc{cmd: cmd, pending: map[int]chan reply{}, exited: make(chan struct{}), waited: make(chan struct{}), stderr: &tailBuffer{}}
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("capacity: worker: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("capacity: worker: %w", err)
	}
	// The parent-death signal comes when the thread that forked the
	// worker exits: fork it from a thread kept for its whole life.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err != nil {
			return
		}
		<-p.exited
		_ = cmd.Wait()
		close(p.waited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("capacity: start worker: %w", err)
	}
	go p.read(out)
	return p, nil
}

func (p *proc) read(out io.Reader) {
	defer func() {
		p.mu.Lock()
		for id, ch := range p.pending {
			close(ch)
			delete(p.pending, id)
		}
		p.mu.Unlock()
		close(p.exited)
	}()
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64*1024), 256*1024*1024)
	for sc.Scan() {
		var r reply
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			continue
		}
		p.mu.Lock()
		ch := p.pending[r.ID]
		delete(p.pending, r.ID)
		p.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
}

// call sends c and waits for its reply within ctx.
func (p *proc) call(ctx context.Context, c command) (reply, error) {
	ch := make(chan reply, 1)
	p.mu.Lock()
	p.next++
	c.ID = p.next
	select {
	case <-p.exited:
		p.mu.Unlock()
		return reply{}, fmt.Errorf("capacity: worker %d exited: %s", p.cmd.Process.Pid, p.stderr)
	default:
	}
	p.pending[c.ID] = ch
	b, _ := json.Marshal(c)
	_, err := p.stdin.Write(append(b, '\n'))
	p.mu.Unlock()
	if err != nil {
		return reply{}, fmt.Errorf("capacity: worker %d: send %s: %w", p.cmd.Process.Pid, c.Op, err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return reply{}, fmt.Errorf("capacity: worker %d exited during %s: %s", p.cmd.Process.Pid, c.Op, p.stderr)
		}
		if r.Err != "" {
			return r, fmt.Errorf("capacity: worker %d: %s", p.cmd.Process.Pid, r.Err)
		}
		return r, nil
	case <-ctx.Done():
		return reply{}, fmt.Errorf("capacity: worker %d: %s: %w", p.cmd.Process.Pid, c.Op, ctx.Err())
	}
}

// kill ends the worker with SIGKILL, as a crash would, and reaps it.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.waited
}

// close ends the worker's stdin, so that it closes its sessions and
// exits, and kills it if it has not within timeout.
func (p *proc) close(timeout time.Duration) error {
	_ = p.stdin.Close()
	select {
	case <-p.waited:
		return nil
	case <-time.After(timeout):
		p.kill()
		return errors.New("capacity: worker did not exit, killed")
	}
}

// procs is a set of workers.
type procs []*proc

func (ps procs) close() {
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() { _ = p.close(30 * time.Second) })
	}
	wg.Wait()
}

// each calls f for every worker concurrently and returns the replies in
// order and the first error.
func (ps procs) each(ctx context.Context, f func(i int, p *proc) (reply, error)) ([]reply, error) {
	rs := make([]reply, len(ps))
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { rs[i], errs[i] = f(i, p) })
	}
	wg.Wait()
	return rs, errors.Join(errs...)
}
