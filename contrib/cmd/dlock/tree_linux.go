//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// tree is the process tree below this process (the guardian, or dlock if
// the guardian was killed), which must be a child subreaper: a process of
// the tree whose parent exits is then reparented to it, not to init, so
// that every process CMD starts stays its descendant, in whatever process
// group or session it moves to. The tree is found by walking /proc, and
// reaped by this process. A tree is used by one goroutine.
type tree struct {
	root   int                 // this process
	cmd    int                 // CMD's PID (0: not this process's child)
	pgid   int                 // CMD's process group while CMD is unreaped (0: none)
	chld   <-chan os.Signal    // receives SIGCHLD (nil: end polls)
	stderr io.Writer           // for warnings
	stat   *unix.WaitStatus    // CMD's wait status, once reaped
	none   bool                // this process has no child left: the tree is empty
	dead   map[int]struct{}    // live processes that end found and sent SIGKILL
	last   map[int]procStat    // the processes of the tree at the last walk
	errs   map[string]struct{} // warnings already printed
}

// procStat is what /proc/PID/stat says of a process.
type procStat struct {
	ppid, pgrp int
	zombie     bool // exited, not yet reaped (or being reaped)
}

// rekill bounds the wait between two rounds of end: a round finds the
// processes forked after the walk of the round before.
const rekill = 100 * time.Millisecond

// reap reaps every child that has exited, without waiting, and notes
// CMD's status and whether no child is left.
func (t *tree) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD):
			// A descendant has a live ancestor chain up to a child of
			// this process (orphans are reparented to it): no child,
			// no descendant.
			t.none = true
			return
		case err != nil || pid <= 0:
			return
		}
		if pid == t.cmd {
			t.stat = &ws
			// CMD's PID is free to be reused once the group is empty:
			// its members, if any, are found by the walk from now on.
			t.pgid = 0
		}
	}
}

// signalGroup sends sig to CMD's process group, while CMD is unreaped.
func (t *tree) signalGroup(sig unix.Signal) {
	if t.pgid > 0 {
		unix.Kill(-t.pgid, sig)
	}
}

// signalAll sends sig to every live process of the tree: CMD's process
// group at once, then each descendant outside it (with onceEach) or each
// descendant (without: SIGKILL, which may come twice). It returns the
// PIDs that refused it (EPERM: another user's process, such as sudo's).
func (t *tree) signalAll(sig unix.Signal, onceEach bool) []int {
	skip := 0
	if onceEach {
		skip = t.pgid
	}
	procs, err := descendants(t.root)
	t.signalGroup(sig)
	if err != nil {
		t.warn("cannot find the processes CMD started: %v", err)
		t.last = nil
		return nil
	}
	t.last = procs
	var refused []int
	for pid, st := range procs {
		if st.zombie {
			continue
		}
		err := error(nil)
		if skip == 0 || st.pgrp != skip {
			err = signalPid(pid, sig, t.root, procs)
		}
		switch {
		case errors.Is(err, unix.EPERM):
			refused = append(refused, pid)
		case sig == unix.SIGKILL:
			t.dead[pid] = struct{}{}
		}
	}
	return refused
}

// end SIGKILLs every process of the tree, again until none is left (a
// process may fork while it is being killed), and reaps them. It returns
// when this process has no child left, or when every live process left
// refused the signal; it returns those (they outlive the tree). A process
// in uninterruptible sleep (D) dies only when its system call returns:
// end waits for it.
func (t *tree) end() []int {
	if t.dead == nil {
		t.dead = map[int]struct{}{}
	}
	for wait := time.Millisecond; ; wait = min(2*wait, rekill) {
		refused := t.signalAll(unix.SIGKILL, false)
		t.reap()
		if t.none {
			return nil
		}
		live := 0
		for _, st := range t.last {
			if !st.zombie {
				live++
			}
		}
		if t.last == nil || (live > 0 && live == len(refused)) {
			return refused // nothing more this process can do
		}
		timer := time.NewTimer(wait)
		select {
		case <-t.chld:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// warn prints a warning to stderr, once.
func (t *tree) warn(format string, args ...any) {
	msg := oneLine(fmt.Sprintf(format, args...))
	if t.errs == nil {
		t.errs = map[string]struct{}{}
	}
	if _, seen := t.errs[msg]; !seen {
		t.errs[msg] = struct{}{}
		fmt.Fprintf(t.stderr, "dlock run: warning: %s\n", msg)
	}
}

// descendants returns the processes whose parent chain leads to root (root
// excluded), as /proc shows them now.
func descendants(root int) (map[int]procStat, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, err
	}
	all := make(map[int]procStat, len(names))
	children := make(map[int][]int)
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok {
			all[pid] = st
			children[st.ppid] = append(children[st.ppid], pid)
		}
	}
	out := make(map[int]procStat)
	for queue := []int{root}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			if _, seen := out[c]; !seen && c != root {
				out[c] = all[c]
				queue = append(queue, c)
			}
		}
	}
	return out, nil
}

// readStat reads /proc/PID/stat; false if there is no such process.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// The fields follow the command name, in parentheses, which may
	// contain spaces and parentheses itself: "state ppid pgrp ...".
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 3 {
		return procStat{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return procStat{}, false
	}
	return procStat{ppid: ppid, pgrp: pgrp, zombie: f[0] == "Z" || f[0] == "X"}, true
}

// signalPid sends sig to pid, if pid is still a process of the tree that
// procs (a walk from root) found. The PID is pinned first with a pidfd, so
// that a process that exits and is reaped after the walk cannot make a
// stranger that reuses its PID get the signal; on kernels before 5.3 (no
// pidfd_open) it falls back to kill(2), with that small race.
func signalPid(pid int, sig unix.Signal, root int, procs map[int]procStat) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ENOSYS) {
		return unix.Kill(pid, sig)
	}
	if err != nil {
		return err // ESRCH: gone
	}
	defer unix.Close(fd)
	// The pidfd holds the process it was opened for: if the process
	// with that PID now has its parent in the tree, it is the one the
	// walk found (or a new child of the tree), not a stranger.
	st, ok := readStat(pid)
	if _, inTree := procs[st.ppid]; !ok || (st.ppid != root && !inTree) {
		return nil
	}
	return unix.PidfdSendSignal(fd, sig, nil, 0)
}
