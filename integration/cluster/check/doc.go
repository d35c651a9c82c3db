// Package check judges a cluster run from what it left: the workers'
// histories, the resource's log, a guard's audit, and the etcd members'
// WALs and logs (the evidence for exemptions). It never touches a running
// cluster, so a saved run can be judged again by a fixed checker
// (cluster.Recheck).
//
// The checkers: pure functions over a run's histories (worker Events and
// resource Records, package history), each stating one property the run
// must have. They return every finding, with the spans or records that
// show it; deciding which findings a run's injected faults excuse is
// Result.Check's business, by evidence (a pause, a slow clock, etcd's
// stale-leader revoke read from the WALs).
//
// The payments workloads are judged by their effects instead
// (payments.go): the orders their intent journals started, in etcd's
// keyspace history, against the charges their payment APIs made, and no
// intent started by a holder whose grant was over.
//
// # Caveats
//
// A checker is trusted only once it has been seen to fail: the cluster
// package's TestPlanted plants one bug per checker. The linearizability
// search is bounded (LinearizableTimeout): a history it cannot order in
// time is reported as such, not passed.
package check
