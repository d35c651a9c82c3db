// Package telemetry says where dlock's OpenTelemetry metrics and traces,
// and its log/slog logs, go ([Providers], given to the WithTelemetry option
// of session, lock, election, redis and the contrib guards, or as the same
// three fields of dlock.Config), and records the telemetry of fencing
// guards ([Fence], [FenceOf], [Guard]), so that every guard, in this module
// or outside it, records the same instruments.
//
// # Guarantee
//
// dlock records these instruments, each where it applies, from the meter
// and tracer
// "github.com/dlock-go/dlock", with the attribute dlock.backend ("etcd",
// "redis" or "redlock") on all but dlock.fence.rejected:
//
//	dlock.acquire.duration  Float64Histogram    s          dlock.outcome: granted, locked (TryLock refused), canceled, error
//	dlock.held              Int64UpDownCounter  {grant}    up at a grant, down exactly once when it ends (Unlock or loss)
//	dlock.lost              Int64Counter        {grant}    dlock.cause: session, deleted, expired (a Redis grant's validity)
//	dlock.session.ended     Int64Counter        {session}  dlock.cause: expired, lease_gone, closed
//	dlock.fence.rejected    Int64Counter        {token}    dlock.guard: memory, postgres, redis, http, grpc, s3, or a name of your own
//	dlock.election.leader   Int64UpDownCounter  {term}     1 while this process leads, per election
//
// Spans: one per acquire ("dlock.lock", "dlock.try_lock", "dlock.acquire",
// "dlock.rlock", "dlock.campaign", ...) and one per guarded write
// ("dlock.fence.write"). Logs: losses, expired sessions and rejected
// tokens at WARN, a Manager's new sessions at INFO, grants, releases and
// terms at DEBUG.
//
// # Limit
//
// Lock names are span attributes (dlock.lock), never metric attributes:
// metrics cannot be broken down by lock (cardinality).
//
// # Caveats
//
//   - The zero Providers means the global OpenTelemetry providers
//     (otel.GetMeterProvider, otel.GetTracerProvider) and no logs.
//   - A nil *Fence records nothing; Guard and NewFence never fail.
//   - What recording costs is mostly the OpenTelemetry SDK's own work per
//     span and instrument; with no-op providers dlock records nothing.
package telemetry
