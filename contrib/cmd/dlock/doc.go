// Command dlock is the command-line face of the dlock SDK: a live demo of
// why fencing tokens matter, a lock wrapper for shell commands, leader
// election, lock inspection and a backend benchmark.
//
// Its guarantee is the SDK's: run hands CMD a fencing token and stops CMD
// when the lock is seen lost. Its limit too: CMD can still act between the
// loss and its exit, and only a resource that checks the token turns that
// into a rejected write. Redlock grants carry no token at all.
//
// Install it with
//
//	go install github.com/dlock-go/dlock/contrib/cmd/dlock@latest
//
// or run it from a checkout with "go run ./contrib/cmd/dlock".
//
// # Usage
//
//	dlock demo
//	dlock run --lock NAME [--permits N | --shared | --rw] [--endpoints h:2379,... | --dsn DSN] [--ttl 10s] [--timeout D] [--grace 10s] -- CMD [ARGS...]
//	dlock elect [flags] NAME VALUE
//	dlock elect --observe [flags] NAME
//	dlock inspect [--json] [--election] [--watch] [flags] NAME
//	dlock bench --dsn DSN [--dsn DSN...] [--clients 4] [--duration 5s] [--hold 0] [--json] [--progress]
//	dlock check-fence [--endpoint URL] [--region R] [--path-style] [--writers 8] [--tokens 64] s3://BUCKET[/PREFIX]
//	dlock version
//	dlock help [COMMAND]
//
// demo starts etcd inside the process and replays the classic failure: A
// holds a lock, pauses past its session timeout, B is granted the lock and
// writes, A wakes up and writes with its old token. The unfenced resource
// ends up with A's stale write; the fenced one rejects it. Then a resource
// that cannot check a token, a payment API: A charges an invoice and
// pauses before recording it; B charges again (two charges), or, through
// the intent journal, finishes A's open intent with A's key (one charge).
// It needs nothing but Go and takes a few seconds.
//
// run holds the lock NAME while CMD runs and passes the fencing token to it
// in $DLOCK_TOKEN (with the lock's name in $DLOCK_LOCK), like "etcdctl lock"
// and "consul lock" but with a token CMD can hand to the resources it
// writes. It works on every backend: etcd (--endpoints, or --dsn etcd://),
// one Redis node (--dsn redis://) or Redlock (--dsn redlock://h1,h2,h3).
// A run that must wait says so on stderr, once, with who holds the lock
// (on etcd its owner and token, and how many wait ahead; on Redis
// "another client"), and again every minute while it waits:
//
//	dlock run: waiting for lock "jobs/nightly": held by host/4242 (token 4711); 2 waiting ahead
//
// A Redis or Redlock grant is renewed every TTL/3 while CMD runs. A Redlock
// grant has no fencing token: $DLOCK_TOKEN is then "<name>:0", which every
// fence guard rejects, and run prints a warning to stderr. If the lock is
// lost while CMD runs (etcd: the session expired or its lease was revoked;
// Redis: a renewal found the key gone, or none succeeded within the TTL),
// CMD's tree gets SIGTERM, then SIGKILL after --grace, and run exits 3.
// SIGINT and SIGTERM are forwarded to CMD's process group. If run itself
// is killed (SIGKILL, the OOM killer), then on Linux a guardian process
// between run and CMD kills CMD's whole tree at once; on FreeBSD the
// kernel kills CMD alone (a parent-death signal); on macOS, the other BSDs
// and Windows CMD keeps running, orphaned. The lock is then released by
// the backend, a TTL after run's last heartbeat or renewal.
//
// CMD's tree is CMD and every process it starts. On Linux, run starts CMD
// through a guardian: dlock itself, re-executed ("dlock-guardian -- CMD" in
// ps), a child subreaper, so that every process CMD starts stays its
// descendant, whatever process group, session or PID namespace it moves
// to. The guardian holds the read end of a pipe whose only write end is
// run's: when run dies, however it dies, the kernel closes it, and the
// guardian SIGKILLs every descendant (found in /proc, signalled through a
// pidfd), again until none is left, reaps them and exits. It also carries
// out run's signals (forwarded ones to CMD's process group, a lost lock's
// to the whole tree) and exits with CMD's exit code. It holds no lock and
// no connection. Elsewhere CMD's tree is CMD's process group.
//
// On etcd, run --permits N holds one of N permits of a semaphore instead
// (up to N runs at once), and run --shared the read side of a
// reader/writer lock (--shared runs share it); a plain run of the same
// name is that lock's writer (--rw says so explicitly). Their tokens order
// grants but, among permits or among readers, do not exclude.
//
// elect campaigns for leadership and holds it until interrupted, then
// resigns; with --observe it prints every change of leader.
//
// inspect shows the holder of a lock (or the leader of an election with
// --election), its token, owner and lease, and the queue behind it. etcd
// keeps no timestamps: age is shown in revisions, and the lease's time left.
// Permits (run --permits) and readers and writers (run --shared, --rw) are
// shown with their kind, each as holding or waiting. With --watch it shows
// the queue again at every change (an etcd watch), until interrupted.
//
// bench measures acquire latency, handoff latency and throughput on one or
// more backends (etcd://, redis://, redlock:// DSNs, see dlock.ParseDSN)
// and prints them side by side (p50, p90, p99 and max), with a histogram of
// acquire latencies; --json prints one JSON object per backend instead.
//
// check-fence checks that an S3-compatible store honours the conditional
// writes that contrib/s3fence fences writes with, before you trust it: it
// runs the checks s3fence.New runs (a deliberately stale conditional write
// must be refused with 412, among others) and a concurrent check (fenced
// writes of interleaved tokens from several writers to one key), prints
// each with PASS or FAIL, deletes its probe objects under PREFIX, and
// exits 1 at the first failure, with its error on stderr. It takes no DSN:
// the store and credentials come from the standard AWS configuration
// (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, ...); --endpoint and
// --region override it.
//
// version prints "dlock <version> (<go version>, ...)": the module version
// of a "go install ...@v0.1.0" build, or "(devel)" for a "go build" in a
// checkout, with the VCS revision when the build recorded it.
// "dlock --version" is the same.
//
// elect and inspect talk to etcd only, and so does run by default:
// --endpoints (default 127.0.0.1:2379, plaintext) or --dsn
// etcd://h1:2379,h2:2379[/prefix][?ttl=10s]. run also takes
// --dsn redis://h:6379[/prefix][?ttl=10s&db=0],
// redis+sentinel://s1:26379,...?master_name=M, redis+cluster://n1:6379,...
// and redlock://h1:6379,h2:6379,h3:6379[/prefix][?ttl=10s] (see
// dlock.ParseDSN); elect and inspect reject them with a usage error. Keys
// live where dlock.Open's Client puts them: under <prefix>/lock/<name>/ and
// <prefix>/election/<name>/ on etcd, at <prefix>:{<name>} on Redis, with
// the prefix "dlock" by default.
//
// TLS goes through the DSN, as for dlock.ParseDSN: etcds://, rediss://
// (and rediss+sentinel://, rediss+cluster://) and redlocks://, with
// cacert (the CA to trust), cert and key (a client certificate, for mutual
// TLS) and server_name, for example
//
//	dlock run --lock jobs/nightly --dsn 'etcds://10.0.0.1:2379?cacert=ca.pem&cert=client.pem&key=client-key.pem' -- ./nightly.sh
//
// A connection that fails says why when it can tell: nothing listening,
// plaintext against TLS or the reverse, a certificate the other side
// refused.
//
// # Environment
//
//	DLOCK_DSN    the default of --dsn in run, elect, inspect and bench;
//	             --dsn or --endpoints, when given, win; unset or empty:
//	             the default (--endpoints 127.0.0.1:2379; bench needs a DSN).
//	             An empty --dsn '' is a usage error, not the default.
//	DLOCK_LOCK   run: set for CMD, the lock's name
//	DLOCK_TOKEN  run: set for CMD, the fencing token ("<name>:<seq>")
//
// Every subcommand has --help ("dlock help COMMAND" is the same); help
// asked for goes to stdout, usage errors to stderr. Flags of elect,
// inspect and bench may also follow their arguments; run's flags must come
// before "--".
//
// # Exit codes
//
//	0      success (run: CMD exited 0; check-fence: every check passed)
//	1      error: backend unreachable within --dial-timeout, lock not acquired within --timeout, …
//	2      bad flags or arguments
//	3      the lock (run) or leadership (elect) was lost while held
//	127    run: CMD could not be started
//	128+N  run: interrupted by signal N while waiting for the lock, or CMD killed by signal N
//
// Otherwise run exits with CMD's exit code. Errors are printed to stderr as
// one line, "dlock <command>: <what went wrong>"; bench prints the results
// of the backends that ran before the error naming the DSN that failed.
//
// # Caveats
//
//   - A lost lock is detected, and CMD is told to stop, only after the
//     fact: CMD may still act between the loss and its exit. Only a
//     resource that checks $DLOCK_TOKEN turns that into a rejected write.
//   - On Redis and Redlock, run notices a deleted lock key (an operator's
//     DEL, a failover, a restart) only at the next renewal, up to TTL/3
//     later; by then another holder may have the lock (see package redis).
//     On Redis the token still tells their writes apart; Redlock has none.
//   - run --owner is stored by etcd only; it is a usage error with Redis.
//   - run starts CMD in a process group of its own, so that everything it
//     starts can be stopped; CMD is therefore not in the terminal's
//     foreground group and should not read from the terminal.
//   - When CMD exits, run releases the lock: processes CMD leaves running
//     are not stopped, and run on without the lock. Have CMD wait for them.
//   - What escapes the guardian when run is killed (Linux): processes
//     started through a daemon (systemd-run, docker run, ssh, at, an
//     already running tmux server), which are not CMD's descendants;
//     another user's processes (sudo) when run is not root: the guardian
//     may not signal them, says so on stderr, and leaves them; a process
//     blocked in the kernel (state D, a hung NFS mount) until its system
//     call returns; and the whole tree if the guardian is killed with run
//     (both SIGKILLed, as by "pkill -f dlock"). The guardian has a process
//     group of its own and the name "exe", so "kill -9 %1", timeout(1) and
//     "pkill dlock" spare it; if it alone is killed, CMD dies with it and
//     run, a child subreaper too, kills the rest and exits 1. Without
//     /proc there is no guardian: run says so and starts CMD directly.
//   - On FreeBSD, only CMD dies with a killed run (the kernel's
//     parent-death signal), not CMD's own children: a shell's background
//     jobs outlive it. Exec the real command ("sh -c 'exec job'") where
//     that matters. On macOS, the other BSDs and Windows nothing stops
//     CMD, and it runs on after the lock is released, one TTL later.
//   - inspect only reads, but connects as run does, starting a session (a
//     lease that holds no key, revoked when it exits).
//   - bench measures from this process: its numbers include the network
//     between it and the servers, and the clients contend for one lock.
package main
