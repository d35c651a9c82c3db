// Package faults is dlock's fault-injection suite: it runs the real lock
// service (etcd members as processes, real redis-server processes,
// containers) under the faults a distributed lock exists to survive, and
// checks the recorded histories with porcupine.
//
// The faults:
//
//   - a TCP proxy per client (etcdtest.ProxiedClient): blackhole, pause, delay;
//   - a lock holder run as a child process (internal/holder) that the test
//     stops with SIGSTOP and resumes with SIGCONT: a real process pause that
//     no in-process goroutine can notice;
//   - members of a 3-member cluster of etcd processes (integration/etcdtest)
//     killed with SIGKILL, the leader among them (no hand-over of
//     leadership), and restarted with their data;
//   - redis-server processes killed and restarted empty;
//   - container pause and network disconnect (container mode, Docker).
//
// The workers contend on a Mutex, a 2-permit Semaphore, an RWMutex and an
// Election; every critical section holds for a random 1-30 ms. The checks:
// a real-time exclusion check (no more live grants in their sections at
// once than the kind allows: one Mutex holder or leader, two permits, a
// writer alone; a grant is live until its Done closes), tokens strictly
// increasing in grant order, and, as porcupine models in this package, a
// fenced register (a write is admitted iff its token is at least the
// highest admitted) and a fenced mutex (one holder at a time, tokens
// strictly increasing). A control runs the workers on a "lock" that grants
// everyone at once and shows that the checks fail it. A failed porcupine
// check writes porcupine's visualization to the artifact directory
// (DLOCK_ARTIFACTS, or a kept temporary directory) and names its path.
//
// The per-change suite is `go test ./integration/faults/...` (bounded:
// about 90 s on 2 cores, 60 s of it without Docker). DLOCK_SOAK=1 adds the
// soak (TestSoak): random faults against 32 clients, 8 per kind, for 2m
// (DLOCK_SOAK=10m, or DLOCK_SOAK_DURATION, for longer; give go test a
// -timeout to match), with a bound on how soon every kind, and every
// client a fault hit, is granted again after each heal.
//
// Every random draw of a scenario (the soak's faults, their order,
// targets and lengths; the holds; readers or writers) derives from
// DLOCK_SEED, or from the clock when it is unset. Each scenario logs
// seed=N and the command that replays it, at the start and on failure.
//
// # Caveats
//
//   - A seed replays the schedule of faults and each worker's draws, not
//     the interleaving: the Go scheduler and etcd decide who is granted
//     when.
//   - The real-time exclusion check sees the test process's own workers;
//     a holder paused in another process is the fence's business (the
//     pause scenarios).
//   - The container scenarios skip when Docker is unavailable, unless
//     DLOCK_REQUIRE=all (or lists "docker"); the Redis scenarios likewise
//     for redis-server ("redis").
package faults
