// Package session keeps one etcd lease alive per process with one
// heartbeat loop, and tells its holder when to stop acting before the
// server can expire the lease.
//
// # Guarantee
//
// Everything a session owns (lock keys, election candidacies) is bound to
// its lease: when the lease ends, by Close (revoke) or expiry, etcd deletes
// all of it in one step. The session keeps a local deadline: the send time
// of the last acknowledged keepalive + TTL − safety margin, on the monotonic
// clock. Done closes at that deadline unless a later keepalive was
// acknowledged. The server cannot expire the lease before it received that
// keepalive + TTL, which is later than our send time + TTL, so Done closes
// at least the safety margin before anyone else can be granted what the
// session held: a holder that lost contact stops first, erring toward a gap
// with no holder, never toward two.
//
// # Limits
//
// The deadline is only as good as the two monotonic clocks (this host's and
// the etcd leader's) agreeing on the length of one TTL to within the margin,
// and the holder checking Done before it acts. A paused holder checks
// nothing; fencing tokens (package fence) cover that case.
//
// # Caveats
//
//   - etcd leases have second granularity: the TTL must be a whole number
//     of seconds and at least MinTTL. etcd may grant a longer TTL than
//     asked; the session uses the granted one.
//   - A keepalive, like the lease's grant and revoke, asks for a leader and
//     is sent again (after a member's refusal, a server timeout, or a
//     second without an answer) until it is acknowledged or the deadline
//     passes, so that an etcd leader election shorter than TTL − margin −
//     heartbeat ends no session. If none is acknowledged before the
//     deadline, the session ends (ErrExpired) even if the server would
//     have kept the lease a little longer.
//   - After Done closes the session is over: create a new one to continue,
//     or let a Manager do it (NewManager: it starts a fresh session on the
//     next Current after one ended, shared by every lock and election
//     built on it).
//     Close still revokes the lease (so a session that expired only locally
//     releases its keys at once when etcd is reachable).
//   - One heartbeat loop serves every lock of the session; AfterDone hooks
//     let holders close their own Done channels before the session's. The
//     same loop checks, after each acknowledged keepalive, the keys of the
//     grants being watched (one LeaseTimeToLive request).
package session
