// Package faults is dlock's fault-injection suite: it runs the real lock
// service (embedded etcd, real redis-server processes, containers) under the
// faults a distributed lock exists to survive, and checks the recorded
// histories with porcupine.
//
// The faults:
//
//   - a TCP proxy per client (etcdtest.ProxiedClient): blackhole, pause, delay;
//   - a lock holder run as a child process (internal/holder) that the test
//     stops with SIGSTOP and resumes with SIGCONT: a real process pause that
//     no in-process goroutine can notice;
//   - members of a 3-member embedded etcd cluster stopped and restarted;
//   - redis-server processes killed and restarted empty;
//   - container pause and network disconnect (container mode, Docker).
//
// The checks: a fenced register (a write is admitted iff its token is at
// least the highest admitted) and a fenced mutex (one holder at a time,
// tokens strictly increasing), as porcupine models in this package. A failed
// check writes porcupine's visualization to the artifact directory
// (DLOCK_ARTIFACTS, or a kept temporary directory) and names its path.
//
// The per-change suite is `go test ./integration/faults/...` (bounded, a few
// minutes on 2 cores). DLOCK_SOAK=1 adds the soak: random faults against 16
// clients for DLOCK_SOAK_DURATION (default 2m).
//
// # Caveats
//
//   - The embedded etcd members run in the test process; only the child
//     holder can be paused with SIGSTOP.
//   - The container scenario skips when Docker is unavailable, unless
//     DLOCK_REQUIRE=all (or lists "docker"); the Redis scenarios likewise
//     for redis-server ("redis").
package faults
