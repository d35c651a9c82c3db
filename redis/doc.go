// Package redis provides two lock.Locker backends on Redis: [Mutex] on a
// single node (SET NX PX, compare-and-delete, a fencing token from INCR) and
// [Redlock] over N ≥ 3 independent masters (the majority algorithm with
// drift accounting). Both are efficiency locks: they keep duplicate work
// rare and cheap, they do not make overlapping holders impossible. For
// correctness, use the etcd lock (package lock) with fencing tokens checked
// at the resource (package fence).
//
// # Guarantee
//
// While the Redis node(s) keep their data and a holder acts only while its
// grant's Done is open, no two holders overlap: Done closes at the end of the
// grant's local validity — the time just before the acquire was sent, plus
// the TTL, minus a drift allowance, on the monotonic clock — which comes
// before the server can expire the key. Release is a compare-and-delete on a
// random 128-bit value, so a late Unlock never deletes a later holder's key,
// and Extend never re-acquires an expired lock.
//
// A [Mutex] grant carries a fencing token: the lock's name and the value of
// an INCR on a counter key in the same hash slot (prefix{name}:seq), minted
// in the same script as the grant and never deleted. Successive grants get
// strictly increasing tokens as long as that node's data lives.
//
// A [Redlock] grant has no sound fencing token: its Token has Seq 0, its
// Capabilities say FencingTokens false, and every fence.Guard rejects Seq 0
// with fence.ErrNoToken, so it cannot be used for fencing by mistake.
//
// # Limits
//
// Nothing tells a holder that its key vanished before its deadline (an
// operator's DEL, a failover, a restart): Done closes at the deadline, or
// earlier when Extend (or the WithAutoExtend watchdog) finds the key gone.
// A holder that pauses longer than its remaining validity (GC, swap, a
// stopped VM) acts after its grant ended, whatever it checked before the
// pause. Only a fencing token checked by the resource makes that harmless,
// and only a Mutex has one.
//
// # Clients
//
// Both accept any goredis.UniversalClient: a plain client, a Sentinel
// failover client (goredis.NewFailoverClient), a Cluster client
// (goredis.NewClusterClient). A lock's keys share the hash tag {name}, so
// they live in one Cluster slot and one script can touch them all.
//
// Clients built with go-redis' default options work too. With
// ContextTimeoutEnabled false, go-redis ignores ctx deadlines on reads and
// waits for its ReadTimeout (5s by default) on a node that stalled (a
// paused process or VM, not a dead one); even with it, a cancellation
// without a deadline does not interrupt a read. So no call waits on a
// stalled node for long past its ctx, nor a Redlock call past the node
// timeout (WithNodeTimeout):
//
//   - with a client that honours ctx deadlines (ContextTimeoutEnabled on
//     a *redis.Client, *redis.ClusterClient or *redis.Ring), a Mutex runs
//     each command in the caller's goroutine with its deadline capped at
//     the node timeout from its start (when ctx can end), and go-redis
//     gives up on a stalled node by then: a node slower than the node
//     timeout fails the command (Lock retries), the compare-and-delete
//     that follows a failed acquire is waited for as long again before it
//     goes on in the background, and a command go-redis gave up on may
//     still run when the node resumes (see Stragglers);
//   - with any other client, a Mutex runs each command in a goroutine of
//     its own when ctx can end; once ctx ended, the caller waits at most
//     the node timeout more for the answer (a responsive node gives it,
//     and the caller cleans up at once if it granted), and as long for
//     that cleanup;
//   - a Redlock sends each request to all nodes at once and decides as
//     soon as the answers so far settle the outcome (a majority granted,
//     or cannot), the node timeout passed, or ctx ended.
//
// # Stragglers
//
// A request that its caller stopped waiting for goes on in the background
// until its node answers: a straggler. A straggler whose SET may have
// landed after its acquire failed (or its caller gave up), or after its
// grant was released, deletes it again with a compare-and-delete when it
// completes, so a stalled node that resumes keeps no stray key. (A
// Redlock's Unlock sends its compare-and-delete only to the nodes that have
// answered the acquire: one whose acquire is still out deletes its key
// itself when it answers, rather than also getting Unlock's delete, which
// could reach it before its SET.) A straggler lasts until its node answers
// or go-redis gives up: for a client that honours ctx deadlines, at the
// node timeout (Redlock); otherwise at the client's ReadTimeout (after its
// WriteTimeout and, on a fresh connection, its DialTimeout); its
// compare-and-delete is bounded the same way, and by 5s. (A Mutex on a
// client that honours ctx deadlines has no stragglers but its cleanups: a
// command that go-redis gave up on is followed by a compare-and-delete,
// which may be a straggler.) Each Mutex and Redlock tracks its
// stragglers: Drain waits for them, and a test (or a program about to
// close its clients) should call it first. If the node stays stalled past
// those timeouts, the command may still run when it resumes, after the
// compare-and-delete: the key then lives until its TTL, as after a crash.
//
// # Telemetry
//
// A Mutex records the instruments of DESIGN.md with dlock.backend "redis",
// a Redlock with "redlock" (WithMeterProvider, WithTracerProvider,
// WithLogger): dlock.acquire.duration by outcome and a span per Lock and
// TryLock; dlock.held, up at a grant and down once when it ends (when the
// ending Unlock's release has answered, or at a loss); dlock.lost by
// cause: "expired" when the local validity ran out (no Extend in time),
// "deleted" when Extend, or the release of the Unlock that ended the
// grant, found the key gone or holding another value. A loss is recorded,
// and logged at WARN, before Done closes. A deletion that nothing checks
// (no watchdog, no Extend, no Unlock before the deadline) shows up as
// "expired".
//
// # Caveats
//
//   - Redis replication is asynchronous. A failover (Sentinel, Cluster) can
//     promote a replica that never saw a grant, and grant the lock again
//     while the first grant is still valid; and since the token counter's
//     last INCRs were lost with it, the new grant can carry the very token
//     of the old one (the package's tests show both on a Sentinel
//     failover). Tokens from before and after a failover are not
//     comparable. A restart without persistence does the same. WithReplicas
//     (WAIT) narrows that window; it does not close it.
//     Capabilities().SurvivesFailover is false for a Mutex.
//   - Redlock assumes bounded clock drift between the client and the nodes
//     (WithDriftFactor), bounded pauses and network delays, and truly
//     independent masters (no replicas, not one machine). A node that
//     crashes and comes back empty within a TTL can grant the lock a second
//     time: run the nodes with appendfsync always, or keep a crashed node
//     down for at least the TTL before it rejoins. Under those assumptions
//     it survives the loss of a minority of nodes.
//   - Redis must run with maxmemory-policy noeviction (or with no memory
//     limit): an evicted lock key is a silently lost lock, and an evicted
//     counter resets the tokens.
//   - Waiters are not served in strict order (Capabilities().FIFO is
//     false): a newcomer's first attempt can take a lock that was just
//     released before the waiter woken for it arrives. A Mutex registers
//     a waiter whose attempt was refused in the sorted set
//     prefix{name}:waiters, oldest first, and the waiter listens on its
//     own channel prefix{name}:w:<id>; a release (the release script)
//     PUBLISHes to the oldest waiter only, and skips (and removes) one
//     that nobody listens for, a dead process, up to 8 a release. The
//     woken waiter keeps its place until it is granted or gives up (a
//     waiter that gives up leaves, and wakes the next if the lock is
//     free), so registered waiters are granted oldest first
//     (TestReleaseWakesOneWaiter: 8 waiters, one acquire attempt per
//     grant, on one node, Sentinel and Cluster). With 16 contenders
//     looping Lock/Unlock a grant costs about 2.6 acquire attempts (the
//     first, the one that registers, the woken one), where a broadcast
//     cost about 9 (BenchmarkContended16VsRedislock counts them). A
//     Redlock keeps the broadcast: a release publishes on
//     prefix{name}:released on each node, heard by every waiter (one
//     registry per node would have to agree on the oldest waiter). Waiters
//     also poll with jittered backoff, never later than the holder's
//     remaining TTL, so an expiry (which wakes nobody) costs at most one
//     poll, and a lost wake-up at most one backoff; so does a woken
//     waiter that stalls (a paused process keeps its subscription, so
//     releases keep waking it, and the others wait for their polls). On a
//     Cluster client with ReadOnly set, subscriptions sit on replicas,
//     where PUBLISH does not count them: each release then wakes up to 8
//     waiters and drops them from the set (they register again at their
//     next attempt).
//   - On a client that does not honour ctx deadlines (go-redis' default
//     options), each Mutex command runs in a goroutine of its own when ctx
//     can end (see Clients): that is what lets a call return on time from
//     a stalled node, and the hand-off costs about an eighth of an
//     uncontended Lock+Unlock on loopback: 1.23× bsm/redislock's against
//     1.05× with ContextTimeoutEnabled, where the commands run in the
//     caller's goroutine (BenchmarkVsRedislock*). With
//     a ctx that cannot end (context.Background) commands run in the
//     caller's goroutine on any client, bounded only by its timeouts.
//   - Lock retries all errors (a node down, a timeout) until its ctx ends;
//     bound it with a deadline. TryLock reports them at once.
//   - With Redlock, a node that has not answered within the node timeout
//     (WithNodeTimeout) counts as failed for that call; go-redis' own
//     retries on a dead node count against it.
package redis
