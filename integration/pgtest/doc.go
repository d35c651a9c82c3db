// Package pgtest starts real PostgreSQL servers for tests: a throwaway
// cluster (initdb) in a temporary directory, listening on a free loopback
// port and on a Unix socket in that directory, with trust authentication for
// the superuser "postgres". It is a test helper, not a way to run PostgreSQL
// in production.
//
// A test that needs a database calls [NewDatabase], which returns the DSN of
// a fresh, empty database on a server shared by the whole test binary (one
// server per package keeps CI time low). The package's TestMain must stop
// that server after the tests:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Shared(m)) }
//
// A test that needs a server of its own (to stop or restart it) calls
// [Start]; the server is stopped by t.Cleanup.
//
// # Guarantee
//
// Every server is a child of the test process: it is stopped when the test
// (or the binary, for the shared server) ends, and killed by the kernel if
// the test process dies first (Linux parent-death signal), so no server
// outlives the tests that started it. Startup is bounded by [StartTimeout].
//
// # Caveats
//
//   - The server runs with fsync off: fast, and not crash-safe. Do not use it
//     for durability tests.
//   - When the binaries (initdb, postgres, psql) are missing, tests skip with a
//     message, or fail when DLOCK_REQUIRE names "postgres" or "all" (see
//     internal/testenv). Binaries are looked up on PATH, then in
//     /usr/lib/postgresql/*/bin (newest version first), or in $PGTEST_BIN.
//   - PostgreSQL refuses to run as root. When the test runs as root the
//     server runs as the "postgres" user if it exists, else as "nobody", and
//     its directory is created for (and owned by) that user.
//   - [NewDatabase] without [Shared] in TestMain leaves the shared server
//     running until the test binary exits (the kernel then kills it), and
//     goleak reports the goroutine that waits for it.
package pgtest
