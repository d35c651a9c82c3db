package faults_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// fleet runs the workers of several contentions at once, on one cluster,
// until halt.
type fleet struct {
	cons    []*contention
	workers []int // per contention

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// newFleet returns an empty fleet, halted at cleanup at the latest.
func newFleet(t testing.TB) *fleet {
	f := &fleet{stop: make(chan struct{})}
	t.Cleanup(f.halt)
	return f
}

// add starts con's workers, worker i on clients[i], until halt or ctx's end.
func (f *fleet) add(ctx context.Context, con *contention, clients []*clientv3.Client) {
	f.cons = append(f.cons, con)
	f.workers = append(f.workers, len(clients))
	for id, cli := range clients {
		f.wg.Go(func() { con.run(ctx, id, cli, f.stop) })
	}
}

// halt stops every worker and waits for them; it is idempotent.
func (f *fleet) halt() {
	f.once.Do(func() {
		close(f.stop)
		f.wg.Wait()
	})
}

// progress waits until every contention has been granted n more times
// than at the call, all within bound. A contention still waiting after
// slow (if positive) is reported to logf with what its workers are doing
// and the state of its queue in etcd, and waited for until bound.
func (f *fleet) progress(ctx context.Context, n int, bound, slow time.Duration, logf func(string, ...any)) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	base := make([]int, len(f.cons))
	for i, con := range f.cons {
		base[i] = con.grants()
	}
	var errs []error
	for i, con := range f.cons {
		if slow > 0 {
			if err := con.waitGrantsWithin(ctx, base[i]+n, slow-time.Since(start)); err == nil {
				continue
			} else if ctx.Err() == nil {
				logf("slow progress, still waiting: %v", err)
			}
		}
		errs = append(errs, con.waitGrantsWithin(ctx, base[i]+n, bound))
	}
	return errors.Join(errs...)
}

// check runs every contention's checks (see contention.check), and checks
// that every worker was granted at least once. nil means all hold.
func (f *fleet) check(t testing.TB) []string {
	t.Helper()
	var bad []string
	for i, con := range f.cons {
		bad = append(bad, con.check(t)...)
		if ids := con.idle(f.workers[i]); len(ids) > 0 {
			bad = append(bad, fmt.Sprintf("%s %q: workers %v never granted", con.kind.name, con.name, ids))
		}
	}
	return bad
}

// figures logs every contention's figures.
func (f *fleet) figures(t testing.TB) {
	t.Helper()
	for _, con := range f.cons {
		t.Logf("%s", con.figures())
	}
}
