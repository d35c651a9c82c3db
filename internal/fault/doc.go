// Package fault is dlock's fault seam: the few places where the cluster
// fault harness (the module integration/cluster, described in
// docs/faults.md) reaches into the library to skew its clock, to watch its
// sessions end, and to plant known bugs that the harness's checkers must
// catch. A checker that has never seen a bug fail is not yet a checker.
//
// # Compiled out without the tag
//
// Everything here is real only in a build with the tag dlock_faults
// (go build -tags dlock_faults). Without it (every ordinary build) each
// function is a one-line constant or a call of its time counterpart, which
// the compiler inlines: Now is time.Now, Until is time.Until, Planted is
// false, the hook is never called. The library then behaves and costs
// exactly as if the seam were not there. Enabled tells which build this
// is.
//
// # The seam, with the tag
//
//   - The clock. The library's local deadlines (a session's, a Redis
//     grant's validity) are computed and timed with Now, Until, Since and
//     Real. DLOCK_CLOCK_RATE=r (a positive float, read once at start-up)
//     runs that clock at r times the real rate: Now() = start + r × (real
//     time elapsed since start). With r < 1 the clock is slow and a local
//     deadline passes late in real time (Done closes late); with r > 1,
//     early. Until(t) is the real duration until the seam's clock reads t,
//     so timers fire at the right real moment. The clock is built from
//     time.Now's monotonic reading: it never jumps.
//   - The hook. OnSessionEnd registers one process-wide function that
//     every session calls when it ends, before any grant on it or its Done
//     reports the end, with its local deadline in real wall-clock time
//     (Wall), so that another process can compare it with its own clock.
//   - The plants. DLOCK_PLANT is a comma-separated list of the bugs to
//     plant (read once at start-up): LateDone, SkipCheck, UnguardedRelease,
//     TryOvergrant, UnfencedIntent.
//     Each constant's doc says what it breaks.
//
// # Hooks in protocol code
//
// Each plant sits in the protocol as one line, as a failpoint of gofail
// does in etcd and bbolt; what a plant does lives here, or in a file of
// the package built with the tag only:
//
//   - LateDone: session's options.validity returns Validity(ttl,
//     ttl − margin); Validity (here) makes it ttl + ttl/2.
//   - SkipCheck: internal/queue's Queue.Acquire (acquire.go) waits only
//     unless Planted(SkipCheck); an entry then takes itself for granted.
//   - UnguardedRelease: internal/queue's leave (hold.go) returns
//     removeHead (internal/queue/plant.go, built with the tag only) if
//     Planted(UnguardedRelease).
//   - TryOvergrant: internal/queue's Queue.Acquire grants a try acquire
//     of a Shared rule at once when overgrant (plant.go) says it finds
//     exactly its permits held, if Planted(TryOvergrant).
//   - UnfencedIntent: package intent's Journal skips its Done check, and
//     its Memory and Etcd stores their fence, if Planted(UnfencedIntent).
//
// Without the tag each hook is a constant the compiler folds away: the
// functions they sit in compile to the same instructions as without them.
//
// # Caveats
//
//   - A build with the tag refuses to start (the package's init panics)
//     when DLOCK_CLOCK_RATE is not a positive finite number or DLOCK_PLANT
//     names an unknown plant: a harness run with a misspelt fault would
//     otherwise pass for a clean one.
//   - Only the local deadlines and the session's heartbeat schedule run on
//     the seam's clock: the retries' backoffs, the acquire timeouts, and
//     whatever the caller's contexts bound still run on real time.
//   - Times from the seam's clock are comparable with each other only;
//     Real and Wall convert them to real time.
package fault
