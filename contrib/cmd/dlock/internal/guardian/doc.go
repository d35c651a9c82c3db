// Package guardian is the process that dlock run puts between itself and
// its command (CMD) on Linux, so that CMD's whole process tree dies with
// dlock, even when dlock dies without a chance to stop it (SIGKILL, the
// OOM killer), before the lock can pass on (a TTL after dlock's last
// heartbeat). It holds no lock and no connection.
//
// The guardian is the dlock binary itself: run starts /proc/self/exe with
// argv [Name, "--", CMD...] and the read end of a pipe as fd ControlFD.
// This package's init sees that and runs the guardian instead of dlock,
// then exits: dlock's main never runs in it. It imports only standard
// packages that Go initializes among the first (os, os/signal, syscall,
// time, errors, runtime; not os/exec, strconv or fmt, which would have it
// wait for most of dlock's packages), so it runs before the heavy packages
// that dlock's commands need (an embedded etcd, gRPC) are initialized: a
// guardian starts in a few milliseconds and dirties little memory of its
// own.
//
// The guardian
//
//   - starts CMD, in a process group of its own and with a parent-death
//     SIGKILL (CMD dies with the guardian);
//   - is a child subreaper (PR_SET_CHILD_SUBREAPER): a process of the tree
//     whose parent exits is reparented to the guardian, not to init, so
//     that every process CMD starts stays its descendant, in whatever
//     process group, session or PID namespace it moves to (a descendant
//     that makes itself a subreaper stays one, and so do its orphans);
//   - holds the read end of a pipe whose only write end is dlock's. The
//     kernel closes that end when dlock exits, however it exits, and the
//     guardian reads EOF: a parent-death notice without a race (if dlock is
//     dead before the guardian looks, its first read is EOF) and that does
//     not depend on which of dlock's threads forked it. It then SIGKILLs
//     every descendant, found in /proc, again until none is left (a process
//     may fork while it is being killed), reaps them, and exits;
//   - otherwise carries out dlock's requests, one byte each on the pipe: N
//     sends signal N to CMD's process group (SIGINT or SIGTERM that dlock
//     forwards); TreeBit|N sends it to every process of the tree (the lock
//     was lost: SIGTERM, then, after --grace, SIGKILL, which ends the tree
//     as EOF does). It exits with CMD's exit code (128+N if CMD was killed
//     by signal N) when CMD exits or, once a tree signal has been asked
//     for, when the whole tree is gone.
//
// The guardian is in a process group of its own, so that signals for
// dlock's group (Ctrl-C, "kill -9 %1", timeout(1)) do not reach it, and
// its name is "exe" (from /proc/self/exe), so that "pkill dlock" and
// "killall dlock" do not either. It catches and drops the signals that
// would end it, except those it started with ignored (nohup's SIGHUP),
// which stay ignored for CMD to inherit.
//
// Each signal goes through a pidfd opened on the PID that the /proc walk
// found, after checking that the process is still in the tree, so that a
// process that exits and is reaped after the walk cannot make a stranger
// that reuses its PID get the signal (before Linux 5.3, which has no
// pidfd, a plain kill(2) leaves that small race).
//
// Why not a cgroup of its own, ended with cgroup.kill (Linux 5.14)? It
// would catch no more: a process that is not CMD's descendant (started by
// a daemon) is not in CMD's cgroup either. It needs a writable cgroup v2
// directory, which a login session or a container rarely delegates, and
// it leaves a directory behind if the guardian is killed. A subreaper
// works for any user on any kernel since 3.4.
//
// # Caveats
//
//   - Not CMD's descendants, so not ended: processes started through a
//     daemon (systemd-run, docker run, ssh, at, an already running tmux
//     server).
//   - A process of another user (sudo) cannot be signalled unless dlock
//     runs as root: the guardian says so on stderr and leaves it.
//   - A process in uninterruptible sleep (state D: a hung NFS mount) dies
//     only when its system call returns.
//   - A guardian killed together with dlock (both SIGKILLed, as by
//     "pkill -f dlock") ends nothing. A guardian killed alone takes CMD
//     with it (CMD's parent-death signal), and the rest of the tree is
//     reparented to dlock, a child subreaper too, which ends it
//     (EndDescendants).
//   - A guardian stopped with SIGSTOP acts only when continued.
//   - A SIGHUP, SIGINT, SIGQUIT or SIGTERM sent to the guardian itself
//     before it has installed its handlers (its first milliseconds) ends
//     it, as if it were killed alone.
//   - Processes that CMD leaves running when it exits are not ended: the
//     guardian exits with CMD, and they run on after dlock releases the
//     lock.
package guardian

const (
	// Name is a guardian's argv[0].
	Name = "dlock-guardian"
	// ControlFD is the guardian's end of the control pipe.
	ControlFD = 3
	// TreeBit marks a request byte whose signal is for every process of
	// the tree; without it, the signal is for CMD's process group.
	TreeBit = 0x80
)
