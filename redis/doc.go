// Package redis provides two lock.Locker backends on Redis: [Mutex] on one
// node (SET NX PX, compare-and-delete, a fencing token from INCR) and
// [Redlock] over N ≥ 3 independent masters (the majority algorithm with
// drift accounting). Both are efficiency locks: they keep duplicate work
// rare; they do not make overlapping holders impossible. For correctness,
// use the etcd lock (package lock) with tokens checked by the resource.
//
// While the nodes keep their data and a holder acts only while its grant's
// Done is open, no two holders overlap: Done closes at the grant's local
// deadline (just before the acquire was sent, plus the TTL, minus 1% and
// 2ms, on the monotonic clock), before the server can expire the key.
// Unlock and Extend compare the grant's random value, so a late one never
// touches a later holder's key. A Mutex token is an INCR in the grant's
// script: it increases only while the node's data lives. A Redlock grant
// has no sound token (Seq 0, FencingTokens false): every fence.Guard
// rejects it.
//
// The limit: nothing tells a holder that its key vanished early (a DEL, an
// eviction, a failover) unless Extend or the WithAutoExtend watchdog finds
// it gone, and a holder that pauses past its deadline acts after its grant
// ended. Only a token checked by the resource makes that harmless.
//
// Every command runs in the caller's goroutine, bounded by the node timeout
// (WithNodeTimeout) on any go-redis client, so a stalled node holds no call
// for longer; a Redlock call decides at a majority or at the node timeout.
// What a call did not wait for finishes in the background: call Drain
// before closing a client. docs/redis.md in the repository has the design.
//
// # Caveats
//
//   - Replication is asynchronous: a Sentinel or Cluster failover (or a
//     restart without persistence) can grant a lock twice and repeat a
//     token. WithReplicas (the script and WAIT in one round trip) counts a
//     grant only once n replicas have it in memory: a failover that
//     promotes one of them keeps it; one that promotes another replica,
//     or a replica that restarts empty, does not (docs/redis.md).
//   - Redlock assumes bounded clock drift, pauses and delays, and masters
//     that fail independently; a node back empty within a TTL can grant
//     twice (use appendfsync always, or keep it down for a TTL).
//   - Run Redis with maxmemory-policy noeviction: an evicted key is a lost
//     lock, an evicted counter restarts the tokens.
//   - Waiters are not served in order; Lock retries every error until its
//     ctx ends, so give it a deadline.
//   - A Ring, or a client type of your own, without ContextTimeoutEnabled is
//     bounded only by its own timeouts. On a *redis.Client without it, the
//     commands run on a view that New makes (Client.WithTimeout): it shares
//     the client's connections, but go-redis (v9.23) runs none of the
//     client's hooks on it, so instrumentation hooks see dlock's commands
//     only on a client with ContextTimeoutEnabled.
package redis
