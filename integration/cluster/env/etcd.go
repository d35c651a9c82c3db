package env

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Disk is where a member keeps its data: a plain directory, or a lossy
// one whose unsynced writes a power loss drops.
type Disk interface {
	Path() string
	Drop() int64     // drops unsynced writes; returns the bytes lost
	Unsynced() int64 // bytes written and not yet synced
	Close() error
}

type plainDisk string

func (d plainDisk) Path() string  { return string(d) }
func (plainDisk) Drop() int64     { return 0 }
func (plainDisk) Unsynced() int64 { return 0 }
func (plainDisk) Close() error    { return nil }

// Etcd is a cluster of etcd members, each a process in its own namespace,
// fsync on, with a low snapshot count so that a member that falls behind
// catches up from a snapshot.
type Etcd struct {
	Members []*Member
	bin     string
}

// Member is one etcd process and its host.
type Member struct {
	Name string
	Host *Host
	disk Disk
	data string // the data directory (on disk)
	args []string
	bin  string
	logs string

	mu   sync.Mutex
	proc *Proc
}

// EtcdConfig configures StartEtcd.
type EtcdConfig struct {
	Bin       string   // the etcd binary
	Hosts     []*Host  // one per member
	Dir       string   // data (under <Dir>/<member>/) and logs
	Lossy     bool     // data on lossyfs: KillLose drops unsynced writes
	Heartbeat int      // ms; default 100
	Election  int      // ms; default 1000
	Extra     []string // more flags for every member
	Omit      []string // default flags to leave out, by name ("--snapshot-catchup-entries"): an older etcd lacks some
}

// StartEtcd starts the members and waits until the cluster has a leader.
func StartEtcd(ctx context.Context, c EtcdConfig) (*Etcd, error) {
	if c.Heartbeat == 0 {
		c.Heartbeat, c.Election = 100, 1000
	}
	var initial []string
	for i, h := range c.Hosts {
		initial = append(initial, fmt.Sprintf("m%d=http://%s:2380", i, h.IP))
	}
	e := &Etcd{bin: c.Bin}
	for i, h := range c.Hosts {
		name := fmt.Sprintf("m%d", i)
		dir := filepath.Join(c.Dir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return e, err
		}
		var d Disk = plainDisk(dir)
		if c.Lossy {
			ld, err := MountLossy(dir)
			if err != nil {
				return e, fmt.Errorf("%s: %w", name, err)
			}
			d = ld
		}
		m := &Member{Name: name, Host: h, disk: d, data: filepath.Join(d.Path(), "data"), bin: c.Bin, logs: filepath.Join(c.Dir, "logs", name+".log")}
		m.args = append([]string{
			"--name=" + name, "--data-dir=" + m.data,
			"--listen-client-urls=http://" + h.IP + ":2379", "--advertise-client-urls=http://" + h.IP + ":2379",
			"--listen-peer-urls=http://" + h.IP + ":2380", "--initial-advertise-peer-urls=http://" + h.IP + ":2380",
			"--initial-cluster=" + strings.Join(initial, ","), "--initial-cluster-state=new",
			"--initial-cluster-token=dlock-cluster",
			fmt.Sprintf("--heartbeat-interval=%d", c.Heartbeat), fmt.Sprintf("--election-timeout=%d", c.Election),
			"--snapshot-count=200", "--snapshot-catchup-entries=50",
			"--log-level=info", // raft's "elected leader X at term T": the evidence of a stale revoke (check/wal.go)
		}, c.Extra...)
		m.args = slices.DeleteFunc(m.args, func(a string) bool {
			name, _, _ := strings.Cut(a, "=")
			return slices.Contains(c.Omit, name)
		})
		e.Members = append(e.Members, m)
	}
	for _, m := range e.Members {
		if err := m.Start(); err != nil {
			return e, err
		}
	}
	_, err := e.Leader(ctx)
	return e, err
}

// Endpoint is the member's client URL.
func (m *Member) Endpoint() string { return "http://" + m.Host.IP + ":2379" }

// PeerURL is the member's peer URL.
func (m *Member) PeerURL() string { return "http://" + m.Host.IP + ":2380" }

// Wipe kills the member, drops its unsynced writes and deletes its data
// directory, and makes its next Start join the running cluster as a new
// member (--initial-cluster-state=existing; it must have been added with
// MemberAdd first). Name, host and URLs stay.
func (m *Member) Wipe() error {
	m.Kill()
	m.disk.Drop()
	if err := os.RemoveAll(m.data); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, a := range m.args {
		if a == "--initial-cluster-state=new" {
			m.args[i] = "--initial-cluster-state=existing"
		}
	}
	return nil
}

// staller is a disk whose syncs can be made to hang (LossyDir).
type staller interface {
	Stall()
	Unstall() int
}

// Stall makes the member's fsyncs hang until the returned function is
// called, which returns how many syncs the stall held; false if its disk
// cannot stall (not lossy).
func (m *Member) Stall() (unstall func() int, ok bool) {
	s, ok := m.disk.(staller)
	if !ok {
		return nil, false
	}
	s.Stall()
	return s.Unstall, true
}

// Start starts the member's process (again, after Kill: with its data).
func (m *Member) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		select {
		case <-m.proc.Done():
		default:
			return fmt.Errorf("%s is running", m.Name)
		}
	}
	p, err := StartProc(m.Host, "etcd "+m.Name, m.logs, nil, nil, append([]string{m.bin}, m.args...)...)
	if err != nil {
		return err
	}
	m.proc = p
	return nil
}

// Proc returns the running process (nil before Start).
func (m *Member) Proc() *Proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc
}

// Kill SIGKILLs the member: no hand-over of leadership, no flush.
func (m *Member) Kill() {
	if p := m.Proc(); p != nil {
		p.Kill()
	}
}

// KillLose SIGKILLs the member and drops the writes it had not synced, as
// a power loss would. It waits (up to wait) for a moment when the member
// has unsynced writes, so that the loss loses something; it returns the
// bytes lost.
func (m *Member) KillLose(wait time.Duration) int64 {
	for end := time.Now().Add(wait); m.disk.Unsynced() == 0 && time.Now().Before(end); {
		time.Sleep(2 * time.Millisecond) // polling the page state: nothing to wait on
	}
	m.Kill()
	return m.disk.Drop()
}

// Pause stops the member with SIGSTOP; Resume continues it.
func (m *Member) Pause() error  { return m.Proc().Signal(syscall.SIGSTOP) }
func (m *Member) Resume() error { return m.Proc().Signal(syscall.SIGCONT) }

// Client returns a client of every member but those excluded, from the
// root namespace (for the harness's own requests: leader, keys, leases).
func (e *Etcd) Client(exclude ...*Member) (*clientv3.Client, error) {
	var eps []string
	for _, m := range e.Members {
		if !slices.Contains(exclude, m) {
			eps = append(eps, m.Endpoint())
		}
	}
	return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
}

// Leader returns the member that leads, as the members themselves report
// it: it waits until a reachable member names a leader that reports
// itself leading, or ctx ends.
func (e *Etcd) Leader(ctx context.Context) (*Member, error) {
	cli, err := e.Client()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	var last error
	for {
		ids := map[uint64]*Member{}
		var leader uint64
		for _, m := range e.Members {
			sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			st, err := cli.Status(sctx, m.Endpoint())
			cancel()
			if err != nil {
				last = fmt.Errorf("%s: %w", m.Name, err)
				continue
			}
			ids[st.Header.MemberId] = m
			if st.Leader == st.Header.MemberId {
				leader = st.Leader
			}
		}
		if m, ok := ids[leader]; ok && leader != 0 {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no leader: %w (last: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Close kills every member and unmounts their disks.
func (e *Etcd) Close() error {
	var errs []error
	for _, m := range e.Members {
		m.Kill()
	}
	for _, m := range e.Members {
		errs = append(errs, m.disk.Close())
	}
	return errors.Join(errs...)
}

// Stallable reports whether m's disk can be stalled (Stall): whether its
// data is on lossyfs.
func (m *Member) Stallable() bool {
	_, ok := m.disk.(staller)
	return ok
}
