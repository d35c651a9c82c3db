// Package dlock is the backend switch: one Config (or DSN) picks the lock
// service, and Client.Locker hands out lock.Locker values that application
// code uses without knowing which backend is behind them.
//
//	cfg, err := dlock.ParseDSN("etcd://10.0.0.1:2379,10.0.0.2:2379/myapp?ttl=10s")
//	if err != nil {
//		return err
//	}
//	c, err := dlock.Open(ctx, cfg)
//	if err != nil {
//		return err // c is nil: nothing to close
//	}
//	defer c.Close(ctx)
//	l, err := c.Locker("orders/eu")
//	if err != nil {
//		return err
//	}
//	return lock.Do(ctx, l, func(ctx context.Context, h lock.Held) error {
//		return db.Write(ctx, h.Token(), ...) // the resource checks the token
//	})
//
// # Guarantee, by backend
//
//   - etcd (etcd://, etcds://): exclusion survives the loss of any minority
//     of members; each grant's fencing token (its key's create revision)
//     strictly increases across holders; waiters are served in FIFO order;
//     Held.Done closes before the server can give the lock to anyone else.
//   - redis (redis://, redis+sentinel://, redis+cluster://): one node's
//     lock, with a token from INCR that is monotonic only while that node's
//     data survives: a failover or a restart without persistence can grant
//     the lock twice and reuse tokens. An efficiency lock.
//   - redlock (redlock://): a majority of N independent nodes, with no
//     sound token (Seq 0: every guard rejects it); it assumes bounded clock
//     drift and pauses, and nodes that do not forget. An efficiency lock.
//
// # Limit
//
// Whatever the backend, no lock service can stop a paused holder from
// acting after its grant ended: only a resource that checks fencing tokens
// (package fence, contrib/*) can. Use etcd when correctness depends on the
// lock, and Redis when the lock only saves duplicate work.
//
// # Caveats
//
//   - One Client holds one etcd session (one lease, one heartbeat loop) for
//     all its locks: when it ends (a partition longer than the TTL), every
//     grant of the Client reports its loss at once. The Client need not be
//     reopened: the next Lock or Campaign runs on a fresh session.
//   - Redis lockers from Open extend their grants every TTL/3 while held,
//     so a held lock lives as long as the process; a paused process still
//     loses it after the TTL.
//   - Client.Election is etcd only; on Redis it returns an error matching
//     errors.ErrUnsupported.
//   - The TTL is etcd's lease TTL (whole seconds, at least 2s) or the Redis
//     grant's validity.
package dlock
