// Package s3test starts a real S3-compatible server for tests: versitygw
// ([Version], Apache-2.0) with its posix backend on a temporary directory,
// listening on a free loopback port, with root credentials of its own. It
// is a test helper, not a way to run an object store in production.
//
// A test calls [Start] for a server of its own, [Server.NewBucket] for an
// empty bucket on it and [Server.Client] for an aws-sdk-go-v2 client; a
// child process (a CLI under test) gets the same settings from
// [Server.Env]. [StartProxy] puts an HTTP proxy in front of a server: with
// [ProxyConfig].Strip set to [ConditionHeaders] it drops the
// conditional-write headers (If-Match, If-None-Match) and signs each
// request again, which makes a store that accepts conditional writes and
// ignores them; with [ProxyConfig].CheckThenWrite it evaluates conditions
// itself and then writes, which makes a store that is correct one request
// at a time and not atomic under concurrent writers; with
// [ProxyConfig].Wrap a test can delay or lose requests and responses.
//
// # Guarantee
//
// Every server is a child of the test process, stopped by t.Cleanup (or
// [Server.Stop]) and killed by the kernel if the test process dies first
// (Linux parent-death signal). Its directory is removed when it stops.
// Startup is bounded by [StartTimeout].
//
// # The binary
//
// [Binary] finds versitygw: $DLOCK_VERSITYGW if set, else a binary built
// earlier into the user's cache directory (os.UserCacheDir()/dlock/
// versitygw-<Version>/versitygw), else it builds one there with "go
// install" from the Go module proxy (a minute or two, once per machine;
// concurrent test binaries wait for one build). CI builds it up front with
// "go run ./contrib/s3fence/s3test/install". When it cannot be had (no go
// command, no module proxy), tests skip with a message, or fail when
// DLOCK_REQUIRE names "versitygw" or "all" (see internal/testenv).
//
// # Caveats
//
//   - Versions before v1.8.0 are not safe for fencing tests: the posix
//     backend evaluated If-Match and If-None-Match: * correctly one request
//     at a time, but concurrent conditional PUTs could all pass their check
//     (versitygw#2288, fixed in v1.8.0). A binary in $DLOCK_VERSITYGW is
//     used as it is; its version is not checked.
//   - Object metadata goes to extended attributes when the temporary
//     directory's filesystem supports them, else to a sidecar directory
//     (versitygw --sidecar).
//   - The posix backend maps keys to files: a bucket cannot hold both
//     "a" and "a/b" (a file and a directory of one name; 409
//     ObjectParentIsFile).
//   - Requests are path-style (http://127.0.0.1:port/bucket/key): clients
//     must set UsePathStyle, as [Server.Client] does.
package s3test
