// Package redistest starts real redis-server processes for tests: one with
// [Start], several independent masters (for Redlock) with [StartN].
//
// Each server listens on a free loopback port, runs with no persistence
// (--save "" --appendonly no) and --maxmemory-policy noeviction (a lock key
// must never be evicted), and is killed by t.Cleanup, so no process outlives
// the test. [Server.Kill], [Server.Stop] and [Server.Restart] let fault tests
// take a node down and bring it back empty on the same port.
//
// The redis-server binary is looked up on PATH. If it is missing the test is
// skipped with a message, or fails when DLOCK_REQUIRE=all (or lists
// "redis"), as decided by internal/testenv.
//
// # Caveats
//
//   - There is no container fallback yet: without the binary on PATH the
//     test skips (or fails under DLOCK_REQUIRE).
//   - Ports are found by binding port 0 and closing the listener, so another
//     process may grab the port before redis-server binds it; Start retries
//     a few times with a fresh port, Restart retries on the same port.
//   - Servers are started with Pdeathsig on Linux, so they die with the test
//     binary even if it is killed before its cleanups run.
package redistest
