package election_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlock-go/dlock/election"
	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/session"
)

// benchTTL is the lease TTL of both implementations in BenchmarkFailover.
const benchTTL = 2 * time.Second

// BenchmarkFailover measures failover time, from the moment the leader is
// cut off from etcd (a fault proxy blackholes its client, so its keepalives
// stop) to the standby's Campaign returning, for this package and for
// etcd's concurrency.Election at the same TTL, interleaved in one run on
// one embedded cluster. It reports both medians (ms) and their ratio. Each
// iteration costs about 2×TTL: run it with -benchtime=3x.
func BenchmarkFailover(b *testing.B) {
	c := etcdtest.New(b)
	cli := c.Client(b)
	var ours, theirs []time.Duration
	for i := range b.N {
		name := fmt.Sprintf("bench-%d", i)
		if i%2 == 0 {
			ours = append(ours, failoverOurs(b, c, cli, name))
			theirs = append(theirs, failoverEtcd(b, c, cli, name))
		} else {
			theirs = append(theirs, failoverEtcd(b, c, cli, name))
			ours = append(ours, failoverOurs(b, c, cli, name))
		}
	}
	mo, me := median(ours), median(theirs)
	b.ReportMetric(float64(mo)/float64(time.Millisecond), "ours-ms")
	b.ReportMetric(float64(me)/float64(time.Millisecond), "etcd-ms")
	b.ReportMetric(float64(mo)/float64(me), "ours/etcd")
}

func failoverOurs(b *testing.B, c *etcdtest.Cluster, cli *clientv3.Client, name string) time.Duration {
	b.Helper()
	ctx := etcdtest.Context(b)
	pcli, p := c.ProxiedClient(b)
	ls := etcdtest.Session(b, pcli, session.WithTTL(benchTTL))
	b.Cleanup(p.Unblackhole) // before the session's Close
	if _, err := newElection(b, ls, name).Campaign(ctx, "leader"); err != nil {
		b.Fatal(err)
	}
	standby := newElection(b, etcdtest.Session(b, cli, session.WithTTL(benchTTL)), name)
	w := etcdtest.WatchPuts(b, cli, election.PrefixOf(standby))
	ch := campaignAsync(ctx, standby, "standby")
	etcdtest.WaitPuts(b, w, 1)

	start := time.Now()
	p.Blackhole()
	r := result(b, ctx, ch)
	d := time.Since(start)
	if r.err != nil {
		b.Fatal(r.err)
	}
	if err := r.term.Resign(ctx); err != nil {
		b.Fatal(err)
	}
	return d
}

func failoverEtcd(b *testing.B, c *etcdtest.Cluster, cli *clientv3.Client, name string) time.Duration {
	b.Helper()
	ctx := etcdtest.Context(b)
	pfx := "/bench-etcd/" + name
	pcli, p := c.ProxiedClient(b)
	ls, err := concurrency.NewSession(pcli, concurrency.WithTTL(int(benchTTL/time.Second)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(ls.Orphan) // its lease is gone; stop the keepalive goroutine
	if err := concurrency.NewElection(ls, pfx).Campaign(ctx, "leader"); err != nil {
		b.Fatal(err)
	}
	ss, err := concurrency.NewSession(cli, concurrency.WithTTL(int(benchTTL/time.Second)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ss.Close() })
	standby := concurrency.NewElection(ss, pfx)
	w := etcdtest.WatchPuts(b, cli, pfx+"/")
	errc := make(chan error, 1)
	go func() { errc <- standby.Campaign(ctx, "standby") }()
	etcdtest.WaitPuts(b, w, 1)

	start := time.Now()
	p.Blackhole()
	var d time.Duration
	select {
	case err := <-errc:
		d = time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
	case <-ctx.Done():
		b.Fatal("etcd standby not elected")
	}
	if err := standby.Resign(ctx); err != nil {
		b.Fatal(err)
	}
	return d
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
