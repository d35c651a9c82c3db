// Package env is the cluster harness's environment: network namespaces
// and the faults a network can have (Net), processes (Proc), etcd members
// on plain or lossy disks, Redis nodes, the guards' servers (PostgreSQL,
// Redis, versitygw, the resource itself), the payments workloads' payment
// APIs (payments.go), and the worker and resource processes (Harness,
// RedisHarness).
//
// It starts, stops, cuts, pauses and kills what it runs; it decides
// nothing: which fault to inject is package fault's, what a run shows is
// package check's.
//
// # Caveats
//
// It needs root (namespaces, iptables, FUSE). A harness not closed leaves
// namespaces, mounts and processes behind: CloseAll closes every live one
// (the tests call it on SIGINT and SIGTERM).
package env
