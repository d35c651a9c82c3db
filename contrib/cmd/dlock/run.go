package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

const runDescription = `
Acquires the lock NAME (waiting if it is held), runs CMD while holding it,
releases it when CMD exits, and exits with CMD's exit code. CMD gets the
lock's name in $DLOCK_LOCK and its fencing token in $DLOCK_TOKEN
("<name>:<seq>", the fence wire form): pass the token on with every write,
so that the resource can reject a write from a holder that has lost the
lock (see "dlock demo").

While it waits, dlock says so on stderr: once when it finds the lock
taken, with who holds it, and again every minute while it still waits,
with the holder of that moment, for example
  dlock run: waiting for lock "jobs/nightly": held by host/4242 (token 4711); 2 waiting ahead
On etcd the holder is the owner its run stored (see --owner) and its
token, as "dlock inspect" shows them (etcd keeps no timestamps, so not
since when); Redis and Redlock do not record who holds a lock: "held by
another client". A free lock is granted without a word.

The lock lives on etcd (--endpoints, or --dsn etcd://...), on one Redis
node (--dsn redis://...) or on Redlock masters (--dsn redlock://h1,h2,h3).
etcd queues waiters in order; Redis and Redlock waiters are not served in
order. A Redis or Redlock grant is renewed every TTL/3 while CMD runs, so
it lasts as long as dlock does.

With --permits N, NAME is a counting semaphore instead (etcd only): up to
N runs hold it at once, each with one permit, granted in FIFO order. Every
run of one NAME must give the same N (one with another N, or one on a
NAME that a plain run holds, fails with "permits mismatch"). Permits
overlap, so their tokens order grants but do not exclude: do not fence one
shared resource with them.

With --shared, the run holds the read side of a reader/writer lock
(etcd only): --shared runs of one NAME hold it together; a writer
excludes them all. The writer is a plain run (without --permits or
--shared) of the same NAME: a plain run's lock is the exclusive side of
the same reader/writer lock, so it waits for the --shared runs before it
and they wait for it. --rw names that side explicitly: it is the same as
a plain run on etcd. Readers and writers queue in one FIFO, so a waiting
writer is not starved by readers that come after it. A reader's token
orders it after the writers before it; readers' tokens do not exclude each
other.

Redlock grants carry no fencing token: $DLOCK_TOKEN is then "<name>:0"
(seq 0), which every fence guard rejects, and dlock prints a warning to
stderr. Use etcd or redis:// where the resource must be fenced.

If the lock is lost while CMD runs (etcd: the session could not reach etcd
in time, or someone revoked its lease; Redis, Redlock: a renewal found the
key gone or taken, or no renewal succeeded before the TTL ran out), CMD's
tree gets SIGTERM, then SIGKILL after --grace, and dlock exits with code 3
once it is gone. CMD's tree is, on Linux, CMD and every process it starts,
even one that left CMD's process group or whose parent exited; elsewhere,
CMD's process group (and dlock exits when CMD has). SIGINT and SIGTERM
sent to dlock are forwarded to CMD's process group.

CMD runs in a process group of its own (so that a lost lock stops all of
it); it is not the terminal's foreground group. When CMD exits, dlock
releases the lock and exits with CMD's code: processes CMD leaves running
are not stopped, and run on without the lock (have CMD wait for them).

If dlock itself dies without a chance to stop CMD (SIGKILL, the OOM
killer):
  Linux: a guardian process between dlock and CMD (dlock itself, shown by
  ps as "dlock-guardian -- CMD...") reads the end of dlock at once and
  SIGKILLs CMD's tree, again until none of it is left. It is a child
  subreaper, so it finds every process CMD started, in whatever process
  group, session or PID namespace. Not covered: processes started through
  a daemon (systemd-run, docker run, ssh, at), which are not CMD's
  descendants; another user's processes (sudo) when dlock is not root
  (the guardian warns, and leaves them); a process blocked in the kernel
  (state D) dies only when its system call returns. If the guardian dies with dlock (both SIGKILLed:
  pkill -f dlock), nothing stops the tree. The guardian is in a process
  group of its own and its name is "exe", so kill -9 %1, timeout(1) and
  pkill dlock spare it. If the guardian alone is killed, CMD dies with it
  and dlock kills the rest, then exits 1.
  FreeBSD: the kernel sends CMD SIGKILL (a parent-death signal); it
  reaches CMD only, not the processes CMD started: exec the real command
  (sh -c 'exec job') or have CMD stop its own children.
  macOS, the other BSDs and Windows: CMD keeps running, orphaned.
Either way the lock is released without dlock, when no heartbeat (etcd) or
renewal (Redis, Redlock) has come for a TTL: on Linux CMD's tree is gone
long before; elsewhere, a CMD still running by then runs unlocked, and
only a resource that checks $DLOCK_TOKEN stops its writes.

The DSN may also come from $DLOCK_DSN (unset or empty: --endpoints'
default); --dsn or --endpoints, when given, win; an empty --dsn is an
error. TLS to etcd or Redis goes through the DSN: etcds://, rediss://,
redlocks:// with cacert, cert and key files (mutual TLS) and server_name.

Exit codes:
  CMD's code  CMD exited while holding the lock (128+N if killed by signal N)
  1           error: backend unreachable, lock not acquired within --timeout…
  2           bad flags or arguments
  3           the lock was lost while CMD ran (whatever CMD's exit code)
  127         CMD could not be started
  128+N       interrupted by signal N while waiting for the lock`

// Defaults for run's flags.
const (
	defaultGrace  = 10 * time.Second
	exitNoCommand = 127
)

func runRun(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "run", "--lock NAME [flags] -- CMD [ARGS...]", runDescription)
	var (
		conn    = connFlags{anyBackend: true}
		name    = fs.String("lock", "", "the lock's name (required): letters, digits, '-._', segments separated by '/'")
		owner   = fs.String("owner", "", "etcd only: value stored in the lock's key, shown by inspect (default \"<hostname>/<pid>\")")
		timeout = fs.Duration("timeout", 0, "give up if the lock is not acquired within this long (0: wait forever)")
		grace   = fs.Duration("grace", defaultGrace, "after the lock is lost, wait this long between SIGTERM and SIGKILL")
		permits = fs.Int("permits", 0, "etcd only: hold one of N permits of the semaphore NAME instead of the lock (N ≥ 1; every run of NAME must give the same N)")
		shared  = fs.Bool("shared", false, "etcd only: hold the read side of the reader/writer lock NAME, shared with other --shared runs; plain runs are its writers")
		rw      = fs.Bool("rw", false, "etcd only: hold the write side of the reader/writer lock NAME (the same as a plain run: excludes --shared runs and other writers)")
	)
	conn.register(fs, e, true)
	// Signals are watched from the start, so none is missed and none kills
	// dlock before it can release the lock.
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigc)

	argv, err := parse(fs, args, false)
	if err != nil {
		return err
	}
	switch {
	case *name == "":
		return usageError("--lock is required")
	case len(argv) == 0:
		return usageError("no command given: dlock run --lock NAME -- CMD [ARGS...]")
	case *timeout < 0:
		return usageError("--timeout %v must not be negative", *timeout)
	case *grace < 0:
		return usageError("--grace %v must not be negative", *grace)
	}
	kind, err := parseKind(fs, *permits, *shared, *rw)
	if err != nil {
		return err
	}
	if err := lock.ValidateName(*name); err != nil {
		return usageError("--lock: %v", err)
	}
	cfg, err := conn.config(fs)
	if err != nil {
		return err
	}
	if *owner != "" && cfg.Backend != dlock.BackendEtcd {
		return usageError("--owner: only etcd stores an owner, not %s", cfg.Backend)
	}
	if kind != kindLock && cfg.Backend != dlock.BackendEtcd {
		return usageError("%s: etcd only (%s has no semaphores or reader/writer locks)", kind.flag(), cfg.Backend)
	}

	// Phase 1: connect and acquire; a signal cancels. run watches signals
	// itself (not through main's ctx): it exits 128+N for signal N, and
	// forwards later signals to CMD.
	actx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sig os.Signal
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		select {
		case sig = <-sigc:
			cancel()
		case <-actx.Done():
		}
	}()
	// signalled stops the watcher and returns the signal it caught, if any.
	signalled := func() os.Signal {
		cancel()
		<-watching
		return sig
	}
	client, err := open(actx, cfg, connHint)
	if err != nil {
		return interrupted(signalled(), err)
	}
	defer func() {
		// For etcd this revokes the session's lease; for Redis it closes
		// the connections (the grant is released before, by release).
		cctx, ccancel := cleanupContext(context.Background())
		defer ccancel()
		client.Close(cctx)
	}()
	acq, err := acquirer(client, *name, *owner, kind, *permits, e.stderr)
	if err != nil {
		return usageError("%v", err)
	}
	lctx := actx
	if *timeout > 0 {
		var lcancel context.CancelFunc
		lctx, lcancel = context.WithTimeout(actx, *timeout)
		defer lcancel()
	}
	held, err := acq.acquire(lctx)
	sig = signalled()
	if err != nil {
		if sig == nil && errors.Is(err, context.DeadlineExceeded) {
			// The backend's last refusal says why (held by another, no
			// replica acknowledged, a node down), where it gives one.
			why := ""
			if _, last, ok := strings.Cut(err.Error(), "(last attempt: "); ok {
				why = " (last attempt: " + last
			}
			return fmt.Errorf("lock %q: not acquired within --timeout %v%s", *name, *timeout, why)
		}
		return interrupted(sig, err)
	}
	if sig != nil { // a signal came just as the lock was granted
		release(held)
		return interrupted(sig, context.Canceled)
	}
	defer release(held)
	if tok := held.Token(); tok.Seq == 0 {
		fmt.Fprintf(e.stderr, "dlock run: warning: %s grants carry no fencing token; DLOCK_TOKEN is %q (seq 0), which every fence guard rejects\n", cfg.Backend, tok.String())
	}

	// Phase 2: run the command while holding the lock.
	return runHolding(e, held, *name, argv, *grace, sigc)
}

// runKind is what run holds: the lock, a permit, or a side of an RWMutex.
type runKind int

const (
	kindLock   runKind = iota // a Mutex (Client.Locker), any backend
	kindPermit                // --permits: lock.Semaphore
	kindRead                  // --shared: lock.RWMutex.RLock
	kindWrite                 // --rw: lock.RWMutex.Lock
)

// flag returns the flag that asks for k.
func (k runKind) flag() string {
	return [...]string{"", "--permits", "--shared", "--rw"}[k]
}

// parseKind checks --permits, --shared and --rw against each other.
func parseKind(fs *flagSet, permits int, shared, rw bool) (runKind, error) {
	var kinds []runKind
	if isSet(fs, "permits") {
		if permits < 1 {
			return 0, usageError("--permits %d must be at least 1", permits)
		}
		kinds = append(kinds, kindPermit)
	}
	if shared {
		kinds = append(kinds, kindRead)
	}
	if rw {
		kinds = append(kinds, kindWrite)
	}
	switch len(kinds) {
	case 0:
		return kindLock, nil
	case 1:
		return kinds[0], nil
	}
	return 0, usageError("%s and %s are mutually exclusive", kinds[0].flag(), kinds[1].flag())
}

// acquisition is how run acquires what it holds: try (no waiting), lock
// (waiting in line), and the notes that say it waits.
type acquisition struct {
	try, lock func(context.Context) (lock.Held, error)
	notes     waitNotes
}

// acquire tries first: a free lock is granted by that one attempt, as
// Lock would grant it. If the lock is taken, it says so on stderr (see
// waitNotes) while Lock waits. Any other failure of the try is left to
// Lock, which retries or reports it as it would have without the try.
func (a *acquisition) acquire(ctx context.Context) (lock.Held, error) {
	h, err := a.try(ctx)
	switch {
	case err == nil:
		return h, nil
	case ctx.Err() != nil:
		return nil, err
	case errors.Is(err, lock.ErrLocked):
		defer a.notes.start(ctx)()
	}
	return a.lock(ctx)
}

// acquirer returns the acquisition of what kind asks for on the lock
// name: the Client's Locker, or an etcd Semaphore or RWMutex on the
// Client's sessions, in the same queue as the Locker's Mutex (see
// etcdLockOptions). Its notes go to w.
func acquirer(client *dlock.Client, name, owner string, kind runKind, permits int, w io.Writer) (*acquisition, error) {
	var lopts []dlock.LockerOption
	if owner != "" {
		lopts = append(lopts, dlock.WithOwner(owner))
	}
	l, err := client.Locker(name, lopts...)
	if err != nil {
		return nil, err
	}
	a := &acquisition{try: l.TryLock, lock: l.Lock, notes: waitNotes{w: w, what: fmt.Sprintf("lock %q", name), every: waitNoteEvery}}
	if client.Source() == nil { // Redis, Redlock: kindLock only
		return a, nil
	}
	keys, err := queueKeysOf(client, name, false)
	if err != nil {
		return nil, err
	}
	src := client.Source()
	a.notes.queue = &inspector{cli: src.Client(), name: name, keys: keys}
	a.notes.self = func(ctx context.Context) int64 {
		s, err := src.Current(ctx)
		if err != nil {
			return 0
		}
		return int64(s.Lease())
	}
	if kind == kindLock {
		return a, nil
	}
	opts, err := etcdLockOptions(client, name, l)
	if err != nil {
		return nil, err
	}
	if owner != "" {
		opts = append(opts, lock.WithOwner(owner))
	}
	switch kind {
	case kindPermit:
		sem, err := lock.NewSemaphore(src, name, permits, opts...)
		if err != nil {
			return nil, err
		}
		a.try, a.lock = sem.TryAcquire, sem.Acquire
		a.notes.what = fmt.Sprintf("a permit of %q (%d permits)", name, permits)
		if permits == 1 {
			a.notes.what = fmt.Sprintf("a permit of %q (1 permit)", name)
		}
		return a, nil
	}
	rw, err := lock.NewRWMutex(src, name, opts...)
	if err != nil {
		return nil, err
	}
	a.try, a.lock = rw.TryLock, rw.Lock
	if kind == kindRead {
		a.try, a.lock = rw.TryRLock, rw.RLock
		a.notes.what = fmt.Sprintf("lock %q (shared)", name)
	}
	return a, nil
}

// runHolding runs argv while held lasts, and returns the exit status.
func runHolding(e *env, held lock.Held, name string, argv []string, grace time.Duration, sigc <-chan os.Signal) error {
	lost := held.Done() // start watching before the command starts
	j, err := startJob(jobSpec{
		argv:   argv,
		env:    append(os.Environ(), "DLOCK_LOCK="+name, "DLOCK_TOKEN="+held.Token().String()),
		stdout: e.stdout,
		stderr: e.stderr,
	})
	if err != nil {
		return exitWith(exitNoCommand, "%v", err)
	}
	defer j.close()

	var (
		wasLost bool
		kill    <-chan time.Time
	)
	for {
		select {
		case <-j.done():
			code, err := j.result()
			switch {
			case wasLost && err != nil:
				fmt.Fprintf(e.stderr, "dlock run: %s\n", oneLine(err.Error()))
				fallthrough
			case wasLost:
				return &codeError{code: exitLockLost} // already reported
			case err != nil:
				return err
			}
			return &codeError{code: code}
		case s := <-sigc:
			j.signal(s)
		case <-lost:
			lost, wasLost = nil, true
			why := held.Err()
			if why == nil {
				why = errors.New("lock lost")
			}
			fmt.Fprintf(e.stderr, "dlock run: %s; stopping %s (SIGTERM now, SIGKILL in %v)\n", oneLine(why.Error()), argv[0], grace)
			j.stop()
			t := time.NewTimer(grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			j.kill()
		}
	}
}

// release unlocks held with a bounded context detached from any signal.
func release(held lock.Held) {
	ctx, cancel := cleanupContext(context.Background())
	defer cancel()
	held.Unlock(ctx)
}

// interrupted returns err, or the 128+N exit for signal sig if one arrived.
func interrupted(sig os.Signal, err error) error {
	if s, ok := sig.(syscall.Signal); ok {
		return exitWith(128+int(s), "interrupted by %v", sig)
	}
	return err
}

// checkTTL checks a session TTL before connecting, with session's rules.
func checkTTL(ttl time.Duration) error {
	if ttl < session.MinTTL || ttl%time.Second != 0 {
		return usageError("--ttl %v must be a whole number of seconds, at least %v", ttl, session.MinTTL)
	}
	return nil
}
