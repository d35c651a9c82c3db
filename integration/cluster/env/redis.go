package env

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// RedisWorkloads are the Redis workloads: "redis", the single-node Mutex
// on the master of a Sentinel group (a master, a replica, three
// sentinels), and "redlock", Redlock over three independent nodes.
var RedisWorkloads = []string{"redis", "redlock"}

// The Sentinel group's settings.
const (
	redisMasterName = "mymaster"
	redisPort       = 6379
	sentinelPort    = 26379
	// sentinelDownAfter is down-after-milliseconds: how long the master
	// must be silent before a sentinel holds it down.
	sentinelDownAfter = time.Second
	// sentinelFailoverTimeout is failover-timeout: how long a failover may
	// take before another is tried.
	sentinelFailoverTimeout = 3 * time.Second
)

// RedisDefaults fills what a Redis run defaults differently from an etcd
// run, before Config.defaults: the workloads, and holds up to two TTLs
// (the lock extends itself while held; a holder must still hold when a
// failover completes for the run to show what the failover does).
func (c *Config) RedisDefaults() {
	if len(c.Workloads) == 0 {
		c.Workloads = RedisWorkloads
	}
	if c.TTL == 0 {
		c.TTL = 3 * time.Second
	}
	if c.Hold == 0 {
		c.Hold = 2 * c.TTL
	}
}

// RedisNode is one redis-server, in server or sentinel mode, alone on its
// host. Each start is a new process on the same address with no data
// (--save "" --appendonly no): a restart comes back empty.
type RedisNode struct {
	Name string
	Host *Host
	Port int
	Dir  string // its working directory, under the run's artifacts

	h    *Harness
	args []string // after the binary

	mu   sync.Mutex
	proc *Proc
}

// Addr returns host:port.
func (n *RedisNode) Addr() string { return net.JoinHostPort(n.Host.IP, strconv.Itoa(n.Port)) }

// Start starts the node with args (nil: its own) and waits until it
// answers PING. A factor other than 0 runs it under the fast-clock shim
// so (see BuildFastClock).
func (n *RedisNode) Start(ctx context.Context, args []string, shim string, factor float64) error {
	if args == nil {
		args = n.args
	}
	var env []string
	if factor != 0 {
		env = fastClockEnv(shim, factor)
	}
	p, err := StartProc(n.Host, n.Name, filepath.Join(n.h.Dir, "logs", n.Name+".log"), env, nil, append([]string{"redis-server"}, args...)...)
	if err != nil {
		return err
	}
	if !n.h.track(p) {
		return errors.New("harness closed")
	}
	n.mu.Lock()
	n.proc = p
	n.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := waitPing(wctx, n.Addr(), p); err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	return nil
}

// Kill SIGKILLs the running process and waits until it is reaped.
func (n *RedisNode) Kill() {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

// running reports whether the node's process is alive.
func (n *RedisNode) running() bool {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil {
		return false
	}
	select {
	case <-p.Done():
		return false
	default:
		return true
	}
}

// Client returns a client of the node, from the test process (which
// reaches every host through the Net's admin link, under no fault).
func (n *RedisNode) Client() *goredis.Client {
	return goredis.NewClient(&goredis.Options{
		Addr: n.Addr(), DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		MaxRetries: -1, ContextTimeoutEnabled: true,
	})
}

// waitPing waits until addr answers PING, or p exits, or ctx ends.
func waitPing(ctx context.Context, addr string, p *Proc) error {
	c := goredis.NewClient(&goredis.Options{Addr: addr, DialTimeout: 500 * time.Millisecond, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not answer PING: %v (%w)", addr, err, ctx.Err())
		case <-p.Done():
			return fmt.Errorf("%s exited: %v (its log: logs/%s.log)", addr, p.Err(), p.Name)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// track adds a server process to those Close kills; false (and the
// process killed) if the harness is closed already.
func (h *Harness) track(p *Proc) bool {
	h.mu.Lock()
	closed := h.closed
	if !closed {
		h.servers = append(h.servers, p)
	}
	h.mu.Unlock()
	if closed {
		p.Kill()
	}
	return !closed
}

// RedisHarness is a running Redis run: a Harness (the network, the
// resource, the workers; Etcd is nil) and the Redis topology, each server
// alone on a host of the Net:
//
//   - the Sentinel group: rm (the master at start) and rr (its replica),
//     and the sentinels s0–s2 (quorum 2, down-after 1s);
//   - the Redlock nodes l0–l2, independent masters;
//   - the workers, all on the host cli.
//
// Close (the Harness's) kills every process, the servers too.
type RedisHarness struct {
	*Harness
	Data      []*RedisNode // rm, rr: which is the master changes with failovers
	Sentinels []*RedisNode
	Redlock   []*RedisNode
	Clients   *Host
	Shim      string // the fast-clock shim, when the classes need it
}

// StartRedis starts a Redis run's harness. On error it closes what it had
// started.
func StartRedis(ctx context.Context, cfg Config) (rh *RedisHarness, err error) {
	cfg.RedisDefaults()
	cfg.Defaults()
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New("cluster: redis-server not found (apt-get install redis-server redis-sentinel)")
	}
	h, err := NewHarness(cfg, "")
	if err != nil {
		return nil, err
	}
	rh = &RedisHarness{Harness: h}
	defer func() {
		if err != nil {
			h.Close()
			rh = nil
		}
	}()
	if slices.Contains(cfg.Classes, "clock-fast-node") || len(cfg.Classes) == 0 {
		if rh.Shim, err = BuildFastClock(h.Dir); err != nil {
			return rh, err
		}
	}
	if err := rh.addNodes(); err != nil {
		return rh, err
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := rh.startServers(sctx); err != nil {
		return rh, err
	}
	for _, wl := range cfg.Workloads {
		for slot := range cfg.PerWorkload {
			if _, err := rh.StartWorker(wl, slot); err != nil {
				return rh, err
			}
		}
	}
	return rh, nil
}

// addNodes adds the nodes' hosts and directories, none started: the
// Sentinel group's data nodes (rm, rr) and sentinels (s0-s2), the
// Redlock nodes (l0-l2), and the workers' host (cli).
func (rh *RedisHarness) addNodes() error {
	h := rh.Harness
	node := func(name string, port int) (*RedisNode, error) {
		host, err := h.Net.AddHost(name)
		if err != nil {
			return nil, err
		}
		n := &RedisNode{Name: name, Host: host, Port: port, Dir: filepath.Join(h.Dir, "redis", name), h: h}
		return n, os.MkdirAll(n.Dir, 0o755)
	}
	for _, name := range []string{"rm", "rr"} {
		n, err := node(name, redisPort)
		if err != nil {
			return err
		}
		n.args = serverArgs(n)
		rh.Data = append(rh.Data, n)
	}
	for i := range 3 {
		n, err := node(fmt.Sprintf("s%d", i), sentinelPort)
		if err != nil {
			return err
		}
		conf := filepath.Join(n.Dir, "sentinel.conf")
		if err := os.WriteFile(conf, []byte(sentinelConf(n, rh.Data[0])), 0o644); err != nil {
			return err
		}
		n.args = []string{conf, "--sentinel"}
		rh.Sentinels = append(rh.Sentinels, n)
	}
	for i := range 3 {
		n, err := node(fmt.Sprintf("l%d", i), redisPort)
		if err != nil {
			return err
		}
		n.args = serverArgs(n)
		rh.Redlock = append(rh.Redlock, n)
	}
	var err error
	rh.Clients, err = h.Net.AddHost("cli")
	return err
}

// startServers starts the resource, the Sentinel group's master and its
// replica, the sentinels and the Redlock nodes, and waits until the
// group can fail over.
func (rh *RedisHarness) startServers(ctx context.Context) error {
	if err := rh.startResource(ctx); err != nil {
		return err
	}
	rm, rr := rh.Data[0], rh.Data[1]
	if err := rm.Start(ctx, nil, "", 0); err != nil {
		return err
	}
	if err := rr.Start(ctx, append(slices.Clone(rr.args), "--replicaof", rm.Host.IP, strconv.Itoa(rm.Port)), "", 0); err != nil {
		return err
	}
	for _, n := range append(slices.Clone(rh.Sentinels), rh.Redlock...) {
		if err := n.Start(ctx, nil, "", 0); err != nil {
			return err
		}
	}
	return rh.AwaitSettled(ctx)
}

// serverArgs are a data node's flags: no persistence, no eviction (a lock
// key must not be evicted), the log on stdout (the process's log file).
func serverArgs(n *RedisNode) []string {
	return []string{
		"--bind", n.Host.IP, "--port", strconv.Itoa(n.Port), "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--dir", n.Dir, "--logfile", "",
		"--maxmemory-policy", "noeviction",
	}
}

// sentinelConf is a sentinel's configuration file (a sentinel rewrites
// it: it lives in the node's directory).
func sentinelConf(n, master *RedisNode) string {
	return fmt.Sprintf(`bind %s
port %d
protected-mode no
dir %s
logfile ""
sentinel resolve-hostnames no
sentinel monitor %s %s %d 2
sentinel down-after-milliseconds %[4]s %[7]d
sentinel failover-timeout %[4]s %[8]d
sentinel parallel-syncs %[4]s 1
`, n.Host.IP, n.Port, n.Dir, redisMasterName, master.Host.IP, master.Port,
		sentinelDownAfter.Milliseconds(), sentinelFailoverTimeout.Milliseconds())
}

// StartWorker starts a worker of workload wl ("redis" or "redlock") in
// slot, on the clients' host.
func (rh *RedisHarness) StartWorker(wl string, slot int) (*Worker, error) {
	switch wl {
	case "redis":
		return rh.launch(wl, slot, 0, nil, rh.Clients, "-sentinels", addrs(rh.Sentinels), "-redis-master-name", redisMasterName,
			"-redis-replicas", strconv.Itoa(rh.Cfg.RedisReplicas))
	case "redlock":
		return rh.launch(wl, slot, 0, nil, rh.Clients, "-redlock", addrs(rh.Redlock))
	}
	return nil, fmt.Errorf("workload %q is not a Redis workload (want redis or redlock)", wl)
}

func addrs(ns []*RedisNode) string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Addr())
	}
	return strings.Join(out, ",")
}

// sentinelClient returns a client of sentinel s.
func sentinelClient(s *RedisNode) *goredis.SentinelClient {
	return goredis.NewSentinelClient(&goredis.Options{
		Addr: s.Addr(), DialTimeout: time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1, ContextTimeoutEnabled: true,
	})
}

// Master returns the data node that a majority of the sentinels name as
// the master, or an error saying what they name.
func (rh *RedisHarness) Master(ctx context.Context) (*RedisNode, error) {
	votes := map[string]int{}
	for _, s := range rh.Sentinels {
		sc := sentinelClient(s)
		a, err := sc.GetMasterAddrByName(ctx, redisMasterName).Result()
		sc.Close()
		if err == nil && len(a) == 2 {
			votes[net.JoinHostPort(a[0], a[1])]++
		}
	}
	for _, n := range rh.Data {
		if votes[n.Addr()] > len(rh.Sentinels)/2 {
			return n, nil
		}
	}
	return nil, fmt.Errorf("no master named by a majority of the sentinels: %v", votes)
}

// ReplicaOf returns the data node that is not m.
func (rh *RedisHarness) ReplicaOf(m *RedisNode) *RedisNode {
	if rh.Data[0] == m {
		return rh.Data[1]
	}
	return rh.Data[0]
}

// settled reports whether the Sentinel group can fail over at once: every
// sentinel names the same master, sees it up and knows the other two
// sentinels and the replica as up, and the master has its replica online.
// Otherwise it says why not.
func (rh *RedisHarness) settled(ctx context.Context) (*RedisNode, string) {
	m, err := rh.Master(ctx)
	if err != nil {
		return nil, err.Error()
	}
	r := rh.ReplicaOf(m)
	for _, s := range rh.Sentinels {
		sc := sentinelClient(s)
		mi, err := sc.Master(ctx, redisMasterName).Result()
		var reps []map[string]string
		if err == nil {
			reps, err = sc.Replicas(ctx, redisMasterName).Result()
		}
		sc.Close()
		if err != nil {
			return nil, fmt.Sprintf("%s: %v", s.Name, err)
		}
		if mi["flags"] != "master" || mi["num-other-sentinels"] != "2" {
			return nil, fmt.Sprintf("%s sees the master as %v", s.Name, mi)
		}
		up := false
		for _, rep := range reps {
			up = up || rep["name"] == r.Addr() && rep["flags"] == "slave"
		}
		if !up {
			return nil, fmt.Sprintf("%s sees no replica %s up: %v", s.Name, r.Addr(), reps)
		}
	}
	c := m.Client()
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return nil, fmt.Sprintf("%s: %v", m.Name, err)
	}
	if !strings.Contains(info, "role:master") || !strings.Contains(info, "ip="+r.Host.IP) || !strings.Contains(info, "state=online") {
		return nil, fmt.Sprintf("%s has not its replica online: %s", m.Name, strings.Join(strings.Fields(info), " "))
	}
	return m, ""
}

// AwaitSettled waits (up to 30 s) until settled.
func (rh *RedisHarness) AwaitSettled(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		m, why := rh.settled(ctx)
		if m != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sentinel group not settled: %s", why)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Leftovers reports the lock keys (prefix "dlock:") left on the data
// nodes and the Redlock nodes once every worker has stopped, waiting up
// to wait for them to expire. The token counters (":seq") stay by design.
func (rh *RedisHarness) Leftovers(ctx context.Context, wait time.Duration) ([]string, error) {
	deadline := time.Now().Add(wait)
	for {
		var left []string
		var errs []error
		for _, n := range append(slices.Clone(rh.Data), rh.Redlock...) {
			if !n.running() {
				continue
			}
			c := n.Client()
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			keys, err := c.Keys(rctx, "dlock:*").Result()
			cancel()
			c.Close()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", n.Name, err))
			}
			for _, k := range keys {
				if !strings.HasSuffix(k, ":seq") {
					left = append(left, fmt.Sprintf("key %s on %s", k, n.Name))
				}
			}
		}
		err := errors.Join(errs...)
		if err == nil && len(left) == 0 || time.Now().After(deadline) {
			slices.Sort(left)
			return left, err
		}
		select {
		case <-ctx.Done():
			return left, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Redis tells whether the run is a Redis run.
func (c Config) Redis() bool {
	return slices.ContainsFunc(c.Workloads, func(wl string) bool { return slices.Contains(RedisWorkloads, wl) })
}
