// Package redisfence is a [fence.Guard] for Redis (go-redis v9): a Lua
// compare-and-set keeps the highest admitted token per lock name in a key,
// and [Guard.Set] writes a value only if the token is current, in the same
// script, so the check and the write are one atomic step.
//
// # Guarantee
//
// On one Redis server, the high-water mark never decreases, no token lower
// than an admitted one is admitted later, and a value written by Set was
// written with a token at least as high as every token admitted before it.
// Seq values are compared as decimal strings, so every uint64 is exact.
//
// # Limit
//
// The guard is as durable as the Redis that stores the mark. A server that
// restarts without persistence, a failover to a replica that had not yet
// received the latest mark (replication is asynchronous), or eviction of the
// key forgets the mark, and stale tokens are admitted again. [Guard.Admit] on
// its own protects no write made elsewhere: only Set (or your own script
// doing the same check) writes atomically with the check.
//
// # Caveats
//
//   - Run the server with persistence (AOF, appendfsync always for the
//     strongest form) and maxmemory-policy noeviction, or accept the limit
//     above. Fence keys have no expiry.
//   - Redis Cluster: Set touches the fence key and the data key in one
//     script, so both must hash to the same slot. Use a hash tag: a prefix
//     such as "{orders}:fence:" (WithPrefix) and data keys "{orders}:...".
//   - The fence key for a lock name is the prefix followed by the name
//     ([Guard.Key]); do not write to it yourself.
package redisfence
