package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/testenv"
)

// Defaults of the replicated setups, in one place.
const (
	// MasterName is the name under which the sentinels of StartSentinel
	// monitor the master.
	MasterName = "mymaster"
	// SentinelCount is how many sentinels StartSentinel runs; their quorum
	// is 2.
	SentinelCount = 3
	// ClusterMasters is how many masters StartCluster runs when asked for
	// fewer than 1.
	ClusterMasters = 3
	// clusterSlots is the number of Redis Cluster hash slots.
	clusterSlots = 16384
	// readyTimeout bounds how long a setup may take to settle (sentinels
	// discovering each other, a cluster agreeing on its slots, a failover).
	readyTimeout = 30 * time.Second
	// pollEvery is the period of the readiness checks: Redis announces
	// these states only by being asked.
	pollEvery = 20 * time.Millisecond
)

// Sentinel is a Redis Sentinel setup on loopback: one master, one replica
// that replicates through a Proxy (Link, so a test can cut replication),
// and SentinelCount sentinels monitoring the master as MasterName with a
// quorum of 2. Everything is killed when the test ends.
type Sentinel struct {
	MasterName string
	Master     *Server
	Replica    *Server
	Sentinels  []*Server
	// Link is the replica's replication link to the master: Blackhole it
	// and writes on the master no longer reach the replica.
	Link *Proxy
}

// StartSentinel starts a Sentinel setup and waits until it is settled:
// the replica is in sync and every sentinel knows the master, the replica
// and the other sentinels, so that a failover can start at once. opts
// apply to every server (WithTLS makes replication and the sentinels speak
// TLS too). It needs the process mode: without redis-server on PATH the
// test skips (or fails, under DLOCK_REQUIRE).
func StartSentinel(t testing.TB, opts ...Option) *Sentinel {
	t.Helper()
	var c config
	for _, o := range opts {
		o(&c)
	}
	requireProcess(t, "a Sentinel setup")
	base := append([]Option{WithArgs("--repl-diskless-sync-delay", "0")}, opts...)
	var tlsArgs []string
	if c.tls != nil {
		tlsArgs = []string{"--tls-replication", "yes"}
	}
	st := &Sentinel{MasterName: MasterName}
	st.Master = Start(t, base...)
	st.Link = NewProxy(t, st.Master.Addr())
	st.Replica = Start(t, append(base, WithArgs(append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(st.Link.Port())}, tlsArgs...)...))...)
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := waitFor(ctx, func() (bool, string) {
		info, err := st.Replica.admin(ctx, func(c *goredis.Client) (string, error) { return c.Info(ctx, "replication").Result() })
		return err == nil && strings.Contains(info, "master_link_status:up"), fmt.Sprintf("replica link: %v %s", err, info)
	}); err != nil {
		t.Fatalf("redistest: sentinel setup: %v", err)
	}

	conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2\n"+
		"sentinel down-after-milliseconds %[1]s 2000\n"+
		"sentinel failover-timeout %[1]s 10000\n"+
		"sentinel parallel-syncs %[1]s 1\n", MasterName, st.Master.Port())
	if c.tls != nil {
		conf += "tls-replication yes\n"
	}
	for range SentinelCount {
		st.Sentinels = append(st.Sentinels, Start(t, append(opts, func(c *config) { c.conf = conf })...))
	}
	if err := waitFor(ctx, func() (bool, string) { return st.settled(ctx) }); err != nil {
		t.Fatalf("redistest: sentinel setup: %v", err)
	}
	return st
}

// settled reports whether every sentinel sees the master with one replica
// and the other sentinels, and why not.
func (st *Sentinel) settled(ctx context.Context) (bool, string) {
	for _, s := range st.Sentinels {
		m, err := st.sentinelMaster(ctx, s)
		if err != nil {
			return false, fmt.Sprintf("sentinel %s: %v", s.Addr(), err)
		}
		if m["num-slaves"] != "1" || m["num-other-sentinels"] != strconv.Itoa(SentinelCount-1) || m["flags"] != "master" {
			return false, fmt.Sprintf("sentinel %s sees %v", s.Addr(), m)
		}
	}
	return true, ""
}

// sentinelMaster returns SENTINEL MASTER of the master, as asked of s.
func (st *Sentinel) sentinelMaster(ctx context.Context, s *Server) (map[string]string, error) {
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: s.Addr(), TLSConfig: s.TLSConfig(), ContextTimeoutEnabled: true})
	defer sc.Close()
	return sc.Master(ctx, st.MasterName).Result()
}

// Addrs returns the sentinels' addresses, for goredis.FailoverOptions'
// SentinelAddrs or a redis+sentinel:// DSN.
func (st *Sentinel) Addrs() []string { return addrsOf(st.Sentinels) }

// addrsOf returns the servers' addresses.
func addrsOf(servers []*Server) []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Client returns a new failover client (goredis.NewFailoverClient) that
// finds the master through the sentinels; it honours ctx deadlines and is
// closed when t ends.
func (st *Sentinel) Client(t testing.TB) goredis.UniversalClient {
	t.Helper()
	c := goredis.NewFailoverClient(&goredis.FailoverOptions{
		MasterName:            st.MasterName,
		SentinelAddrs:         st.Addrs(),
		TLSConfig:             st.Master.TLSConfig(),
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// MasterAddr returns the master's address as the first sentinel reports it.
func (st *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	s := st.Sentinels[0]
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: s.Addr(), TLSConfig: s.TLSConfig(), ContextTimeoutEnabled: true})
	defer sc.Close()
	hp, err := sc.GetMasterAddrByName(ctx, st.MasterName).Result()
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("get-master-addr-by-name returned %v", hp)
	}
	return hp[0] + ":" + hp[1], nil
}

// Failover makes the first sentinel fail over at once (SENTINEL FAILOVER:
// no agreement needed, the master need not be down) and waits until every
// sentinel reports the replica as the master and the replica has taken
// the role. The old master is then turned into a replica of the new one
// by the sentinels, in their own time.
func (st *Sentinel) Failover(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	s := st.Sentinels[0]
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: s.Addr(), TLSConfig: s.TLSConfig(), ContextTimeoutEnabled: true})
	defer sc.Close()
	if err := sc.Failover(ctx, st.MasterName).Err(); err != nil {
		t.Fatalf("redistest: SENTINEL FAILOVER: %v", err)
	}
	want := st.Replica.Addr()
	if err := waitFor(ctx, func() (bool, string) {
		for _, s := range st.Sentinels {
			m, err := st.sentinelMaster(ctx, s)
			if err != nil || hostPort(m) != want {
				return false, fmt.Sprintf("sentinel %s reports master %v (%v)", s.Addr(), m, err)
			}
		}
		role, err := st.Replica.admin(ctx, func(c *goredis.Client) (string, error) { return c.Info(ctx, "replication").Result() })
		return err == nil && strings.Contains(role, "role:master"), fmt.Sprintf("replica: %v %s", err, role)
	}); err != nil {
		t.Fatalf("redistest: failover: %v", err)
	}
}

// hostPort returns "ip:port" of a SENTINEL MASTER reply.
func hostPort(m map[string]string) string { return m["ip"] + ":" + m["port"] }

// Cluster is a Redis Cluster on loopback: masters only (no replicas), the
// hash slots split evenly between them. Every node is killed when the
// test ends.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts a cluster of masters nodes (ClusterMasters if fewer
// than 1): each a cluster-enabled redis-server with its own cluster bus
// port, given its share of the slots (CLUSTER ADDSLOTSRANGE) and joined to
// the others (CLUSTER MEET). It waits until every node reports
// cluster_state:ok and the same slot map. opts apply to every node
// (WithTLS makes the cluster bus speak TLS too). It needs the process
// mode: without redis-server on PATH the test skips (or fails, under
// DLOCK_REQUIRE).
func StartCluster(t testing.TB, masters int, opts ...Option) *Cluster {
	t.Helper()
	if masters < 1 {
		masters = ClusterMasters
	}
	var c config
	for _, o := range opts {
		o(&c)
	}
	requireProcess(t, "a Redis Cluster")
	cl := &Cluster{}
	var busPorts []int
	for range masters {
		busPort, err := freePort()
		if err != nil {
			t.Fatalf("redistest: find a free port: %v", err)
		}
		args := []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
			"--cluster-port", strconv.Itoa(busPort),
		}
		if c.tls != nil {
			args = append(args, "--tls-cluster", "yes")
		}
		cl.Nodes = append(cl.Nodes, Start(t, append(opts, WithArgs(args...))...))
		busPorts = append(busPorts, busPort)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	per := clusterSlots / masters
	for i, n := range cl.Nodes {
		lo, hi := i*per, (i+1)*per-1
		if i == masters-1 {
			hi = clusterSlots - 1
		}
		if _, err := n.admin(ctx, func(c *goredis.Client) (string, error) {
			return c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Text()
		}); err != nil {
			t.Fatalf("redistest: cluster: ADDSLOTSRANGE %d %d on %s: %v", lo, hi, n.Addr(), err)
		}
	}
	for i, n := range cl.Nodes[1:] {
		// With its own bus port, MEET must name it (the default is port+10000).
		if _, err := cl.Nodes[0].admin(ctx, func(c *goredis.Client) (string, error) {
			return c.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.Port(), busPorts[i+1]).Text()
		}); err != nil {
			t.Fatalf("redistest: cluster: MEET %s: %v", n.Addr(), err)
		}
	}
	if err := waitFor(ctx, func() (bool, string) { return cl.settled(ctx) }); err != nil {
		t.Fatalf("redistest: cluster: %v", err)
	}
	return cl
}

// settled reports whether every node reports cluster_state:ok, knows every
// node, and serves the same slot ranges, and why not.
func (cl *Cluster) settled(ctx context.Context) (bool, string) {
	var first string
	for _, n := range cl.Nodes {
		info, err := n.admin(ctx, func(c *goredis.Client) (string, error) { return c.ClusterInfo(ctx).Result() })
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d\r", len(cl.Nodes))) {
			return false, fmt.Sprintf("node %s: %v %s", n.Addr(), err, info)
		}
		slots, err := n.admin(ctx, func(c *goredis.Client) (string, error) {
			s, err := c.ClusterSlots(ctx).Result()
			if err != nil {
				return "", err
			}
			var b strings.Builder
			for _, r := range s {
				fmt.Fprintf(&b, "%d-%d@", r.Start, r.End)
				for _, node := range r.Nodes {
					b.WriteString(node.Addr)
				}
				b.WriteString(" ")
			}
			return b.String(), nil
		})
		if err != nil || strings.Count(slots, "@") != len(cl.Nodes) {
			return false, fmt.Sprintf("node %s slots: %v %s", n.Addr(), err, slots)
		}
		if first == "" {
			first = slots
		} else if slots != first && !sameFields(slots, first) {
			return false, fmt.Sprintf("node %s slots %s, node %s slots %s", n.Addr(), slots, cl.Nodes[0].Addr(), first)
		}
	}
	return true, ""
}

// sameFields reports whether a and b hold the same space-separated fields
// in any order.
func sameFields(a, b string) bool {
	fa, fb := strings.Fields(a), strings.Fields(b)
	if len(fa) != len(fb) {
		return false
	}
	seen := map[string]int{}
	for _, f := range fa {
		seen[f]++
	}
	for _, f := range fb {
		if seen[f] == 0 {
			return false
		}
		seen[f]--
	}
	return true
}

// Addrs returns the nodes' addresses, the seeds for goredis.ClusterOptions'
// Addrs or a redis+cluster:// DSN.
func (cl *Cluster) Addrs() []string { return addrsOf(cl.Nodes) }

// Client returns a new cluster client (goredis.NewClusterClient) seeded
// with every node; it honours ctx deadlines and is closed when t ends.
func (cl *Cluster) Client(t testing.TB) goredis.UniversalClient {
	t.Helper()
	c := goredis.NewClusterClient(&goredis.ClusterOptions{
		Addrs:                 cl.Addrs(),
		TLSConfig:             cl.Nodes[0].TLSConfig(),
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// admin runs fn on a short-lived client of s.
func (s *Server) admin(ctx context.Context, fn func(c *goredis.Client) (string, error)) (string, error) {
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), TLSConfig: s.TLSConfig(), ContextTimeoutEnabled: true, MaxRetries: -1})
	defer c.Close()
	return fn(c)
}

// requireProcess ends the test (skip, or fail under DLOCK_REQUIRE) if
// redis-server is not on PATH: what needs servers that reach each other on
// loopback.
func requireProcess(t testing.TB, what string) {
	t.Helper()
	if _, err := exec.LookPath(Binary); err != nil {
		testenv.Missing(t, "redis", fmt.Sprintf("%s needs %s on PATH: %v", what, Binary, err))
	}
}

// waitFor polls cond every pollEvery until it holds or ctx ends; then it
// returns an error quoting cond's last reason.
func waitFor(ctx context.Context, cond func() (bool, string)) error {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s", ctx.Err(), why)
		case <-tick.C:
		}
	}
}
