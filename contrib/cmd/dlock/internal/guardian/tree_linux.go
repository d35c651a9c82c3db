//go:build linux

package guardian

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER.
const prSetChildSubreaper = 36

// rekill bounds the wait between two rounds of tree.end: a round finds
// the processes forked after the walk of the round before.
const rekill = 100 * time.Millisecond

// tree is the process tree below this process (the guardian, or dlock if
// the guardian was killed), which must be a child subreaper, so that every
// process of the tree stays its descendant. The tree is found by walking
// /proc, and reaped by this process. A tree is used by one goroutine.
type tree struct {
	root int                 // this process
	cmd  int                 // CMD's PID (0: not this process's child)
	pgid int                 // CMD's process group while CMD is unreaped (0: none)
	chld <-chan os.Signal    // receives SIGCHLD (nil: end polls)
	stat *syscall.WaitStatus // CMD's wait status, once reaped
	none bool                // this process has no child left: the tree is empty
	dead map[int]struct{}    // processes that end found alive and SIGKILLed
	last map[int]procStat    // the processes of the tree at the last walk
	errs map[string]struct{} // warnings already printed
}

// procStat is what /proc/PID/stat says of a process.
type procStat struct {
	ppid, pgrp int
	zombie     bool // exited, not yet reaped
}

// EndDescendants SIGKILLs every descendant of this process, again until
// none is left, and reaps them. dlock calls it when its guardian was
// killed: dlock is then a child subreaper with no other child, and what
// was left of CMD's tree has been reparented to it. It returns how many
// processes it killed, and the PIDs of those it may not kill (another
// user's), which it leaves running, with their names.
func EndDescendants() (killed int, refused map[int]string) {
	t := &tree{root: os.Getpid()}
	refused = make(map[int]string)
	for _, pid := range t.end() {
		refused[pid] = comm(pid)
	}
	return len(t.dead), refused
}

// reap reaps every child that has exited, without waiting, and notes
// CMD's status and whether no child is left.
func (t *tree) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.ECHILD):
			// A descendant has a live ancestor chain up to a child of
			// this process (orphans are reparented to it): no child, no
			// descendant.
			t.none = true
			return
		case err != nil || pid <= 0:
			return
		}
		if pid == t.cmd {
			t.stat = &ws
			// CMD's PID may be reused once its group is empty: the
			// group's members, if any, are found by the walk from now on.
			t.pgid = 0
		}
	}
}

// code returns the guardian's exit code for CMD's wait status.
func (t *tree) code() int {
	switch {
	case t.stat == nil:
		return 128 + int(syscall.SIGKILL) // killed by end, and not yet reaped
	case t.stat.Signaled():
		return 128 + int(t.stat.Signal())
	}
	return t.stat.ExitStatus()
}

// signalGroup sends sig to CMD's process group, while CMD is unreaped.
func (t *tree) signalGroup(sig syscall.Signal) {
	if t.pgid > 0 {
		syscall.Kill(-t.pgid, sig)
	}
}

// signalAll sends sig to every live process of the tree: CMD's process
// group at once, then each descendant outside it (with onceEach) or each
// descendant (without: for SIGKILL, which may come twice). It returns the
// PIDs that refused it (EPERM: another user's process, such as sudo's).
func (t *tree) signalAll(sig syscall.Signal, onceEach bool) []int {
	skip := 0
	if onceEach {
		skip = t.pgid
	}
	procs, err := descendants(t.root)
	t.signalGroup(sig)
	if err != nil {
		t.warn("cannot find the processes of the tree: " + err.Error())
		t.last = nil
		return nil
	}
	t.last = procs
	var refused []int
	for pid, st := range procs {
		if st.zombie {
			continue
		}
		var err error
		if skip == 0 || st.pgrp != skip {
			err = signalPid(pid, sig, t.root, procs)
		}
		switch {
		case errors.Is(err, syscall.EPERM):
			refused = append(refused, pid)
		case sig == syscall.SIGKILL:
			t.dead[pid] = struct{}{}
		}
	}
	return refused
}

// end SIGKILLs every process of the tree, again until none is left (a
// process may fork while it is being killed), and reaps them. It returns
// when this process has no child left, or when every live process left
// refused the signal: it returns those (they outlive the tree). A process
// in uninterruptible sleep (D) dies only when its system call returns:
// end waits for it.
func (t *tree) end() []int {
	if t.dead == nil {
		t.dead = make(map[int]struct{})
	}
	for wait := time.Millisecond; ; wait = min(2*wait, rekill) {
		refused := t.signalAll(syscall.SIGKILL, false)
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

// endAll ends the tree, warns of each process that refused to die, and
// returns those.
func (t *tree) endAll() []int {
	refused := t.end()
	for _, pid := range refused {
		t.warn("cannot kill pid " + itoa(pid) + " (" + comm(pid) + "): operation not permitted; it keeps running")
	}
	return refused
}

// warn prints a warning to stderr, once.
func (t *tree) warn(msg string) {
	if t.errs == nil {
		t.errs = make(map[string]struct{})
	}
	if _, seen := t.errs[msg]; !seen {
		t.errs[msg] = struct{}{}
		os.Stderr.WriteString("dlock run: warning: " + msg + "\n")
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
		pid, ok := atoi(name)
		if !ok {
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
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	return parseStat(b)
}

// parseStat parses the content of /proc/PID/stat.
func parseStat(b []byte) (procStat, bool) {
	// The fields follow the command name, in parentheses, which may
	// contain spaces and parentheses itself: ") state ppid pgrp ...".
	i := len(b) - 1
	for i >= 0 && b[i] != ')' {
		i--
	}
	f := fields(string(b[i+1:]), 3)
	if len(f) < 3 || f[0] == "" {
		return procStat{}, false
	}
	ppid, ok1 := atoi(f[1])
	pgrp, ok2 := atoi(f[2])
	if !ok1 || !ok2 {
		return procStat{}, false
	}
	return procStat{ppid: ppid, pgrp: pgrp, zombie: f[0][0] == 'Z' || f[0][0] == 'X'}, true
}

// signalPid sends sig to pid, if pid is still a process of the tree that
// procs (a walk from root) found: the PID is pinned first with a pidfd,
// then checked (see the package doc). Before Linux 5.3 (no pidfd_open) it
// falls back to kill(2).
func signalPid(pid int, sig syscall.Signal, root int, procs map[int]procStat) error {
	fd, _, e := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if e == syscall.ENOSYS {
		return syscall.Kill(pid, sig)
	}
	if e != 0 {
		return e // ESRCH: gone
	}
	defer syscall.Close(int(fd))
	// The pidfd holds the process it was opened for: if the process with
	// that PID now has its parent in the tree, it is the one the walk
	// found (or a new child of the tree), not a stranger.
	st, ok := readStat(pid)
	if _, inTree := procs[st.ppid]; !ok || (st.ppid != root && !inTree) {
		return nil
	}
	if _, _, e := syscall.Syscall6(sysPidfdSendSignal, fd, uintptr(sig), 0, 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

// comm returns the name of process pid, or "?".
func comm(pid int) string {
	b, err := os.ReadFile("/proc/" + itoa(pid) + "/comm")
	if err != nil || len(b) == 0 {
		return "?"
	}
	if b[len(b)-1] == '\n' {
		b = b[:len(b)-1]
	}
	return string(b)
}
