// Package redistest starts real Redis servers for tests: one with [Start],
// several independent masters (for Redlock) with [StartN], a Sentinel
// setup (a master, a replica and three sentinels) with [StartSentinel],
// and a Redis Cluster of masters with [StartCluster]; [WithTLS] makes any
// of them speak TLS only.
//
// A server is a redis-server process on a free loopback port. Without the
// binary on PATH the test is skipped with a message, or fails when
// DLOCK_REQUIRE=all (or lists "redis"), as decided by
// internal/testenv. (Redis in a container, for faults the container
// runtime injects: integration/containers.StartRedis.)
//
// Each server runs with no persistence (--save "" --appendonly no) and
// --maxmemory-policy noeviction (a lock key must never be evicted), and is
// killed by t.Cleanup, so nothing outlives the
// test. [Server.Kill], [Server.Stop] and [Server.Restart] let fault tests
// take a node down and bring it back empty on the same address;
// [Server.Pause] and [Server.Resume] stop and continue it (SIGSTOP,
// SIGCONT) with its connections and data, a node that stalls rather than
// dies. A
// [Proxy] between two endpoints can blackhole their traffic; the Sentinel
// setup's replica replicates through one ([Sentinel].Link), so a test can
// cut replication before a failover ([Sentinel.Failover]).
//
// [Server.Client] returns a client that honours ctx deadlines
// (ContextTimeoutEnabled), [Server.DefaultClient] one with go-redis'
// defaults, as applications usually build it.
//
// # Caveats
//
//   - The Sentinel setup, the Cluster and WithTLS need the process mode
//     (redis-server on PATH): their servers address each other on
//     loopback. Without the binary the test skips, or fails under
//     DLOCK_REQUIRE.
//   - Readiness is polled (every 20ms, bounded): Redis announces that a
//     replica is in sync, that sentinels found each other (their hello
//     messages go out every 2s, so a Sentinel setup takes a few seconds)
//     or that a cluster agrees on its slots only when asked.
//   - Ports are found by binding port 0 and closing the listener, so another
//     process may grab the port before the server (or Docker) binds it;
//     Start retries a few times with a fresh port, Restart of a process
//     retries on the same port, Restart of a container fails the test if
//     the port was taken meanwhile.
//   - Process servers are started with Pdeathsig on Linux, so they die with
//     the test binary even if it is killed before its cleanups run.
//     Containers have no such guard: the container mode sets
//     TESTCONTAINERS_RYUK_DISABLED=true in the process environment, if it
//     is unset, because the reaper's image cannot be pulled without a
//     registry; a test binary killed before its cleanups leaves its
//     containers running (they carry testcontainers' labels, for
//     `docker rm -f $(docker ps -aq --filter label=org.testcontainers)`).
//   - In a container, 127.0.0.1 is the container itself: [WithArgs] that
//     name another server by its Addr (--replicaof 127.0.0.1 port) do not
//     work in the container mode.
//   - A container's Addr is on the host testcontainers reports
//     (TESTCONTAINERS_HOST_OVERRIDE when set); when that host is not
//     loopback and does not answer, as happens inside a container where it
//     is the bridge gateway, Start falls back to 127.0.0.1.
//   - The container image has no shell: wait strategies that exec into the
//     container do not apply; Start waits for PING on the published port.
package redistest
