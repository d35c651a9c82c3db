package env

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Proc is a process started in a host's namespace (ip netns exec, which
// execs the command: the PID is the command's own). It runs in its own
// process group and dies with the test process (parent-death signal).
// Its stderr and stdout go to a log file; stdout lines are also passed to
// an optional callback (the workers' phase lines).
type Proc struct {
	Name string
	Host *Host

	cmd    *exec.Cmd
	done   chan struct{}
	err    error // valid once done is closed
	log    *os.File
	copied sync.WaitGroup
}

// StartProc starts args[0] with args[1:] in h's namespace, logging to
// logPath. onLine, if not nil, is called with each stdout line, in order,
// from one goroutine.
func StartProc(h *Host, name, logPath string, env []string, onLine func(string), args ...string) (*Proc, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.NS}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = logf
	p := &Proc{Name: name, Host: h, cmd: cmd, done: make(chan struct{}), log: logf}
	var out io.ReadCloser
	if onLine != nil {
		if out, err = cmd.StdoutPipe(); err != nil {
			logf.Close()
			return nil, err
		}
	} else {
		cmd.Stdout = logf
	}
	fmt.Fprintf(logf, "=== %s start %s: %v\n", time.Now().Format("15:04:05.000"), name, args)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	if out != nil {
		p.copied.Add(1)
		go func() {
			defer p.copied.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				line := sc.Text()
				fmt.Fprintln(logf, line)
				onLine(line)
			}
			_, _ = io.Copy(io.Discard, out)
		}()
	}
	go func() {
		p.copied.Wait() // Wait closes the pipe: read it all first
		p.err = cmd.Wait()
		fmt.Fprintf(logf, "=== %s exit %s: %v\n", time.Now().Format("15:04:05.000"), name, p.err)
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited and been waited for.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err returns the exit error once Done is closed (nil: exit status 0).
func (p *Proc) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return errors.New("still running")
	}
}

// Signal sends sig to the process (not its group: a worker's group is
// itself, an etcd member's too).
func (p *Proc) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return fmt.Errorf("%s has exited", p.Name)
	default:
	}
	return p.cmd.Process.Signal(sig)
}

// Kill sends SIGKILL (and SIGCONT, so that a stopped process dies at
// once) and waits until the process has been reaped.
func (p *Proc) Kill() {
	select {
	case <-p.done:
		return // reaped: its PID (and group) may be someone else's now
	default:
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	_ = syscall.Kill(-p.Pid(), syscall.SIGCONT)
	<-p.done
}

// Stop asks the process to exit with SIGTERM (resuming it if stopped) and
// kills it if it has not exited within grace. It returns the exit error,
// or an error saying it had to be killed.
func (p *Proc) Stop(grace time.Duration) error {
	_ = p.Signal(syscall.SIGTERM)
	_ = p.Signal(syscall.SIGCONT)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return p.err
	case <-t.C:
		p.Kill()
		return fmt.Errorf("%s did not exit within %v of SIGTERM: killed", p.Name, grace)
	}
}
