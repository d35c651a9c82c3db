// Package bench_test holds the anchor benchmarks of the Redis backends:
// dlock against bsm/redislock and go-redsync/redsync, interleaved in one
// loop on the same servers (see BENCHMARKS.md). It is a module of its own,
// so that the core module does not require the peers it is measured
// against. (The etcd lock's anchor, etcd's own concurrency.Mutex, comes
// with etcd's client: its benchmarks stay in package lock.)
package bench_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
