// Package session keeps one etcd lease alive per process with one
// heartbeat loop, and tells its holder when to stop acting before the
// server can expire the lease.
//
// # Guarantee
//
// Everything a session owns (lock keys, election candidacies) is bound to
// its lease: when the lease ends, by Close (revoke) or expiry, etcd deletes
// all of it in one step. Done closes at the session's local deadline, the
// send time of the last acknowledged keepalive + TTL − safety margin on the
// monotonic clock, unless a later keepalive was acknowledged. The server
// counts the TTL from when it received that keepalive, after we sent it; so
// Done closes at least the margin before anyone else can be granted what
// the session held, erring toward a gap with no holder, never toward two.
//
// # Limit
//
// The deadline is only as good as this host's and the etcd leader's
// monotonic clocks agreeing on the length of one TTL to within the margin,
// and the holder checking Done before it acts. A paused holder checks
// nothing; fencing tokens (package fence) cover that case.
//
// # Caveats
//
//   - etcd leases have second granularity: the TTL must be a whole number
//     of seconds and at least MinTTL. etcd may grant a longer TTL than
//     asked; the session uses the granted one.
//   - A keepalive (like the lease's grant and revoke) asks for a leader and
//     is sent again until acknowledged or the deadline passes, so an etcd
//     leader election shorter than TTL − margin − heartbeat − tick (the
//     heartbeat grid's, at most 500ms: 4.2 s at the defaults) ends no
//     session. If none is acknowledged in time, the session ends
//     (ErrExpired), even if the server would have kept the lease longer.
//   - After Done closes the session is over: create a new one, or use a
//     Manager, which starts a fresh session on the next Current after one
//     ended, shared by every lock and election built on it. Close still
//     revokes the lease, so a session that expired only locally releases
//     its keys at once when etcd is reachable.
//   - One heartbeat loop serves every lock of the session. The locks and
//     elections keep their lease-bound state with the session, which ends
//     it before Done closes, so their grants report a loss no later than
//     the session; after each acknowledged keepalive it checks the keys of
//     the watched grants in one request.
package session
