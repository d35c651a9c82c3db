package env

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Net is a private network for one run: a hub namespace holding a bridge,
// and one namespace per host, each joined to the bridge by a veth pair.
// The test process reaches every host through an admin veth whose root
// end has the subnet's .254 address, so it can talk to the members and
// the resource without entering a namespace. Faults are iptables rules
// and tc qdiscs inside the hosts' namespaces: the root namespace's rules
// are never touched.
//
// Each Net has its own /24 in 10.0.0.0/8, derived from the process ID and
// a counter (64 Nets a process before names repeat), and names its namespaces "dlock-<pid>-<n>-<host>", so that
// Sweep can remove what a killed run left behind.
type Net struct {
	key    int    // pid*64 + n: names and subnet
	prefix string // "dlock-<pid>-<n>-"
	hub    string // the hub namespace
	admin  string // the admin veth's root end
	subnet string // "10.b.c."
	routed bool   // the unreachable route is ours to delete

	mu    sync.Mutex
	hosts []*Host
	rules map[*Host]bool // hosts with rules or qdiscs to heal
}

// Host is one network namespace on a Net, with one address.
type Host struct {
	Name string // "m0", "res", ...
	NS   string // the namespace
	IP   string // its address on the Net
	veth string // its end of the veth pair, inside NS
}

var nets atomic.Int32

// NewNet creates the hub namespace, its bridge and the admin link.
func NewNet() (*Net, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("cluster: network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("cluster: ip (iproute2) not found")
	}
	// A subnet another run routes (its key collided with ours, mod the
	// subnets there are) is skipped: two routes to one subnet would mix
	// the runs up.
	for range 64 {
		n := int(nets.Add(1)-1) % 64
		key := os.Getpid()*64 + n
		if out, err := exec.Command("ip", "route", "show", subnetOf(key)+"0/24").Output(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			continue
		}
		return newNet(key, n)
	}
	return nil, errors.New("cluster: no free subnet")
}

func newNet(key, n int) (*Net, error) {
	nt := &Net{
		key:    key,
		prefix: fmt.Sprintf("dlock-%d-%d-", os.Getpid(), n),
		admin:  fmt.Sprintf("d%xa", key),
		subnet: subnetOf(key),
		rules:  make(map[*Host]bool),
	}
	nt.hub = nt.prefix + "hub"
	err := run(
		// If the admin link ever went (and with it the route through
		// it), traffic to the subnet must fail here, not leave by the
		// default route: an unreachable route under it, marked ours.
		[]string{"route", "add", "unreachable", nt.subnet + "0/24", "metric", "1000", "proto", routeProto},
	)
	if err != nil {
		return nil, err
	}
	nt.routed = true
	err = run(
		[]string{"netns", "add", nt.hub},
		[]string{"-n", nt.hub, "link", "set", "lo", "up"},
		[]string{"-n", nt.hub, "link", "add", "br0", "type", "bridge"},
		[]string{"-n", nt.hub, "link", "set", "br0", "up"},
		[]string{"link", "add", nt.admin, "type", "veth", "peer", "name", nt.admin + "p"},
		[]string{"link", "set", nt.admin + "p", "netns", nt.hub},
		[]string{"-n", nt.hub, "link", "set", nt.admin + "p", "master", "br0", "up"},
		[]string{"addr", "add", nt.subnet + "254/24", "dev", nt.admin},
		[]string{"link", "set", nt.admin, "up"},
	)
	if err != nil {
		nt.Close()
		return nil, err
	}
	return nt, nil
}

// AddHost creates a namespace named after name, joined to the bridge,
// with the next address of the subnet.
func (nt *Net) AddHost(name string) (*Host, error) {
	nt.mu.Lock()
	i := len(nt.hosts) + 1
	h := &Host{Name: name, NS: nt.prefix + name, IP: nt.subnet + strconv.Itoa(i), veth: fmt.Sprintf("d%xh%d", nt.key, i)}
	nt.hosts = append(nt.hosts, h)
	nt.mu.Unlock()
	err := run(
		[]string{"netns", "add", h.NS},
		[]string{"-n", h.NS, "link", "set", "lo", "up"},
		[]string{"link", "add", h.veth, "type", "veth", "peer", "name", h.veth + "p"},
		[]string{"link", "set", h.veth, "netns", h.NS},
		[]string{"link", "set", h.veth + "p", "netns", nt.hub},
		[]string{"-n", nt.hub, "link", "set", h.veth + "p", "master", "br0", "up"},
		[]string{"-n", h.NS, "addr", "add", h.IP + "/24", "dev", h.veth},
		[]string{"-n", h.NS, "link", "set", h.veth, "up"},
	)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Drop cuts all traffic between a and b, both ways.
func (nt *Net) Drop(a, b *Host) error {
	return errors.Join(nt.DropOneWay(a, b), nt.DropOneWay(b, a))
}

// DropOneWay drops packets from "from" to "to" (to's replies still reach
// from, but a TCP connection cannot deliver anything from "from"). The
// rule sits in to's namespace.
func (nt *Net) DropOneWay(from, to *Host) error {
	nt.mark(to)
	return iptables(to.NS, "-A", "INPUT", "-s", from.IP, "-j", "DROP")
}

// Lose drops a random fraction p (0 < p < 1) of the packets between a and
// b, both ways.
func (nt *Net) Lose(a, b *Host, p float64) error {
	nt.mark(a)
	nt.mark(b)
	prob := strconv.FormatFloat(p, 'f', 3, 64)
	return errors.Join(
		iptables(b.NS, "-A", "INPUT", "-s", a.IP, "-m", "statistic", "--mode", "random", "--probability", prob, "-j", "DROP"),
		iptables(a.NS, "-A", "INPUT", "-s", b.IP, "-m", "statistic", "--mode", "random", "--probability", prob, "-j", "DROP"),
	)
}

// Slow limits what h sends to rate (a tc rate, "256kbit") with a token
// bucket: this kernel has no netem, so a slow link is a narrow one, whose
// queue delays what exceeds the rate.
func (nt *Net) Slow(h *Host, rate string) error {
	nt.mark(h)
	return run([]string{"netns", "exec", h.NS, "tc", "qdisc", "replace", "dev", h.veth, "root", "tbf", "rate", rate, "burst", "4kb", "latency", "400ms"})
}

func (nt *Net) mark(h *Host) {
	nt.mu.Lock()
	nt.rules[h] = true
	nt.mu.Unlock()
}

// Heal removes every rule and qdisc the faults added.
func (nt *Net) Heal() error {
	nt.mu.Lock()
	hosts := make([]*Host, 0, len(nt.rules))
	for h := range nt.rules {
		hosts = append(hosts, h)
	}
	clear(nt.rules)
	nt.mu.Unlock()
	var errs []error
	for _, h := range hosts {
		errs = append(errs, iptables(h.NS, "-F", "INPUT"))
		// No qdisc to delete is not an error worth reporting.
		_ = run([]string{"netns", "exec", h.NS, "tc", "qdisc", "del", "dev", h.veth, "root"})
	}
	return errors.Join(errs...)
}

// Close deletes every namespace of the Net (their veths, bridge and rules
// go with them) and the admin link. Processes still running in a
// namespace keep it alive: stop them first.
func (nt *Net) Close() error {
	nt.mu.Lock()
	hosts := nt.hosts
	nt.hosts = nil
	nt.mu.Unlock()
	var errs []error
	for _, h := range hosts {
		errs = append(errs, run([]string{"netns", "del", h.NS}))
	}
	_ = run([]string{"link", "del", nt.admin}) // gone with the hub, usually
	errs = append(errs, run([]string{"netns", "del", nt.hub}))
	if nt.routed {
		errs = append(errs, run([]string{"route", "del", "unreachable", nt.subnet + "0/24", "metric", "1000", "proto", routeProto}))
	}
	return errors.Join(errs...)
}

// routeProto marks the unreachable routes the harness adds (a routing
// protocol number of its own, among those free for local use).
const routeProto = "201"

// Subnet returns the Net's address prefix ("10.b.c.").
func (nt *Net) Subnet() string { return nt.subnet }

// Sweep removes what runs whose process is gone left behind (a test binary
// killed before its cleanup ran): their namespaces (the veth pairs, the
// admin links and the bridges go with them) and their unreachable routes.
// It returns what it removed. It never touches a live run's: a name's PID
// is alive, a route's subnet is a live hub's.
func Sweep() []string {
	var gone []string
	live := map[string]bool{}
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		pid, n, ok := runPID(e.Name())
		if !ok {
			continue
		}
		if alive(pid) {
			if strings.HasSuffix(e.Name(), "-hub") {
				live[subnetOf(pid*64+n)+"0/24"] = true
			}
			continue
		}
		if run([]string{"netns", "del", e.Name()}) == nil {
			gone = append(gone, e.Name())
		}
	}
	out, _ := exec.Command("ip", "route", "show", "type", "unreachable", "proto", routeProto).Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || live[f[1]] {
			continue
		}
		if run([]string{"route", "del", "unreachable", f[1], "metric", "1000", "proto", routeProto}) == nil {
			gone = append(gone, "route "+f[1])
		}
	}
	return gone
}

// subnetOf is a Net's address prefix for its key.
func subnetOf(key int) string { return fmt.Sprintf("10.%d.%d.", 100+(key>>8)%150, key&0xff) }

// runPID parses "dlock-<pid>-<n>-<host>".
func runPID(ns string) (pid, n int, ok bool) {
	rest, ok := strings.CutPrefix(ns, "dlock-")
	if !ok {
		return 0, 0, false
	}
	f := strings.SplitN(rest, "-", 3)
	if len(f) != 3 {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(f[0])
	n, err2 := strconv.Atoi(f[1])
	return pid, n, err1 == nil && err2 == nil
}

func alive(pid int) bool {
	return pid == os.Getpid() || syscall.Kill(pid, 0) == nil
}

func iptables(ns string, args ...string) error {
	return run(append([]string{"netns", "exec", ns, "iptables", "-w"}, args...))
}

// run runs ip with each argument list in turn, stopping at the first
// failure.
func run(cmds ...[]string) error {
	for _, args := range cmds {
		var out bytes.Buffer
		c := exec.Command("ip", args...)
		c.Stdout, c.Stderr = &out, &out
		if err := c.Run(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
		}
	}
	return nil
}
