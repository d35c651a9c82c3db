// Package dlock is the backend switch: one Config (or DSN) picks the lock
// service, and Client.Locker hands out lock.Locker values that application
// code uses without knowing which backend is behind them.
//
//	cfg, _ := dlock.ParseDSN("etcd://10.0.0.1:2379,10.0.0.2:2379/myapp?ttl=10s")
//	c, _ := dlock.Open(ctx, cfg)
//	defer c.Close(ctx)
//	l, _ := c.Locker("orders/eu")
//	err := lock.Do(ctx, l, func(ctx context.Context, h lock.Held) error {
//		return db.Write(ctx, h.Token(), ...) // the resource checks the token
//	})
//
// Switching backends is a one-line change of the DSN:
//
//	etcd://h1:2379,h2:2379,h3:2379/prefix?ttl=10s   safe, fenced (consensus)
//	redis://h:6379/prefix?ttl=10s                  efficiency lock, one node
//	redlock://h1,h2,h3,h4,h5/prefix?ttl=10s        efficiency lock, no token
//
// # Guarantees, by backend
//
//   - etcd: mutual exclusion in the lock service survives the loss of any
//     minority of etcd members; every grant carries a fencing token (the
//     key's create revision) that strictly increases across holders; waiters
//     are served in FIFO order; a grant lives as long as the process's
//     session heartbeats reach etcd, and the holder learns it may have lost
//     the lock (Held.Done) before the server can give it to anyone else.
//   - redis: a single node's SET NX PX lock with a token from INCR. The
//     token is monotonic only while that node's data survives: an
//     asynchronous replica promoted in a failover, or a restart without
//     persistence, can grant the lock twice and reuse tokens.
//   - redlock: a majority of N independent nodes. It has no sound fencing
//     token (Token().Seq is 0 and every guard rejects it) and its safety
//     rests on bounded clock drift, bounded pauses and nodes that do not
//     forget (fsync=always or delayed restarts).
//
// Whatever the backend, no lock service can stop a paused holder from
// acting after its grant ended: only a resource that checks fencing tokens
// (package fence, contrib/*) can. Use etcd when correctness depends on the
// lock, and Redis when the lock only saves duplicate work.
//
// # Caveats
//
//   - Redis lockers from Open renew their grants automatically (every TTL/3)
//     while held, so that a held lock lives as long as the process, as with
//     etcd; a paused process still loses it after the TTL.
//   - One Client holds one etcd session (one lease, one heartbeat loop) for
//     all its locks: when the session ends, every lock of the Client is lost
//     and the Client must be reopened.
package dlock
