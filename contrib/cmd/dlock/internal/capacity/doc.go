// Package capacity measures what one etcd cluster carries with dlock, side
// by side with etcd's own concurrency package (Session, Mutex) and "the
// limit" (a bare Txn put-if-absent of the lock key on the session's lease
// and a delete guarded by its create revision; no queue), in the same run
// on the same cluster. It backs "dlock bench --capacity" and the capacity
// tests of the CLI.
//
// Run drives six scenarios (a throughput, b held locks, c waiters,
// d sessions, e mass expiry, f failover), each at several loads, each
// load run Options.Runs times per implementation; a Row holds the
// medians. The load comes from worker processes, this executable started
// again with WorkerEnv set (the dlock binary checks IsWorker in main, a
// test binary in TestMain), each holding many sessions on a few etcd
// clients: a session stands for a production process. Driver and
// workers speak JSON lines over the workers' stdin and stdout; a worker
// dies with its driver (a parent-death signal on Linux, its stdin's end
// elsewhere).
//
// The cluster's costs come from etcd itself, so that a user's cluster can
// be measured: each member's /metrics on its client URL (CPU, RSS, db
// size, gRPC requests and bytes received) and the leader from Status.
//
// # Limit
//
// The figures are only as good as the host that runs the workers: on a
// small machine the workers compete with etcd for CPU, so compare
// implementations within one run (ratios), not absolute figures across
// machines. Latencies between processes (handoff, expiry, failover) use
// the wall clock, which is one clock because driver and workers share a
// host.
//
// # Caveats
//
//   - "leader_*" metrics are what the leader member itself received: a
//     client connected to a follower reaches the leader through it (its
//     keepalives are forwarded, its writes proposed through raft), which
//     shows in the leader's CPU and in the all-member "all_*" rates, not
//     in the leader's request counters.
//   - The limit has no queue: in c its waiters retry when the key is
//     deleted (a herd, O(W²) requests), so it runs only up to HerdMax
//     waiters and has no FIFO order to count.
//   - In d the limit's session is a bare lease kept by clientv3 KeepAlive,
//     which is what concurrency.Session does: the two rows should agree.
//   - Without Failover or FailoverCmd, f moves the leader gracefully
//     (MoveLeader), which is not a crash; with a command, the killed
//     member must come back by itself before the next run.
package capacity
