package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/integration/cluster/history"
	"github.com/dlock-go/dlock/integration/etcdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestWorkloads runs 3 workers of each workload with -rounds, and one
// mutex worker holding its grant until SIGTERM, against one etcd member and one resource, all real
// processes on loopback, and checks what a fault-free run must show.
func TestWorkloads(t *testing.T) {
	dir := t.TempDir()
	workers, holder := runWorkloads(t, dir)
	events, err := history.ReadWorkers(filepath.Join(dir, "history"))
	require.NoError(t, err)
	records, err := history.ReadLines[history.Record](filepath.Join(dir, "resource.jsonl"))
	require.NoError(t, err)
	fencedWrites := checkWorkloadHistories(t, events, workers, holder, len(records))
	checkWorkloadRecords(t, records, fencedWrites)
}

// The workloads TestWorkloads runs, and each worker's grants (but the
// holder's).
var (
	testWorkloads = []string{"mutex", "semaphore", "rwmutex", "election"}
	testRounds    = 4
)

// runWorkloads runs TestWorkloads' workers and resource, with their
// histories and log in dir, until they exit; it returns the workers by
// ID, and the holder's ID.
func runWorkloads(t *testing.T, dir string) (map[int]*proc, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	etcd := etcdtest.New(t)
	bin := t.TempDir()
	build(ctx, t, filepath.Join(bin, "worker"), ".")
	build(ctx, t, filepath.Join(bin, "resource"), "../resource")

	res, addr := startResource(ctx, t, filepath.Join(bin, "resource"), filepath.Join(dir, "resource.jsonl"))

	rounds, workloads := testRounds, testWorkloads
	args := func(id int, workload string) []string {
		return []string{
			"-id", fmt.Sprint(id), "-workload", workload, "-endpoints", strings.Join(etcd.Endpoints(), ","),
			"-ttl", "2s", "-hold", "300ms", "-seed", fmt.Sprint(id), "-resource", "http://" + addr,
			"-history", filepath.Join(dir, "history", fmt.Sprintf("w%d.jsonl", id)),
		}
	}
	workers := make(map[int]*proc)
	for i, wl := range workloads {
		for j := range 3 {
			id := 3*i + j
			workers[id] = start(ctx, t, filepath.Join(bin, "worker"), append(args(id, wl), "-rounds", fmt.Sprint(rounds))...)
		}
	}
	// One more mutex worker, on a lock of its own, without -rounds and
	// with the plant hold-forever: it holds its first grant until SIGTERM.
	holder := 3 * len(workloads)
	workers[holder] = start(ctx, t, filepath.Join(bin, "worker"), append(args(holder, "mutex"), "-lock", "dlock-held", "-plant", "hold-forever")...)
	if !workers[holder].waitLine(ctx, "PHASE use 1") {
		workers[holder].cmd.Process.Kill()
		workers[holder].wait()
		t.Fatalf("the holder got no grant:\n%s", workers[holder].stderr.String())
	}
	require.NoError(t, workers[holder].cmd.Process.Signal(syscall.SIGTERM))

	for id, p := range workers {
		assert.NoError(t, p.wait(), "w%d:\n%s", id, p.stderr.String())
	}
	require.NoError(t, res.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, res.wait(), "resource:\n%s", res.stderr.String())
	require.False(t, t.Failed())

	return workers, holder
}

// checkWorkloadHistories checks the workers' histories, grant by grant,
// for what a fault-free run must show, and returns the fenced writes the
// workers made.
func checkWorkloadHistories(t *testing.T, events []history.Event, workers map[int]*proc, holder, nrecords int) int {
	t.Helper()
	rounds, workloads := testRounds, testWorkloads
	type key struct{ w, g int }
	type grant struct {
		ends     []history.Event
		released int
	}
	grants := make(map[key]*grant)
	perWorkload := make(map[string]int)
	perWorker := make(map[int]int)
	lastTok := make(map[string]uint64)
	lost, fencedWrites := 0, 0
	for _, ev := range events {
		k := key{ev.W, ev.G}
		switch ev.Kind {
		case history.Grant:
			require.NotContains(t, grants, k, "one grant per g: %+v", ev)
			grants[k] = &grant{}
			perWorkload[ev.Workload]++
			perWorker[ev.W]++
			assert.NotZero(t, ev.Tok, "%+v", ev)
			if (ev.Workload == "mutex" || ev.Workload == "election") && ev.W != holder {
				assert.Greater(t, ev.Tok, lastTok[ev.Workload], "tokens increase in grant order: %+v", ev)
				lastTok[ev.Workload] = ev.Tok
			}
		case history.Op:
			require.Contains(t, grants, k, "an op under a grant: %+v", ev)
			assert.Equal(t, "ok", ev.Result, "fault-free: every op succeeds: %+v", ev)
			assert.True(t, ev.Call > 0 && ev.Ret >= ev.Call, "%+v", ev)
			assert.False(t, ev.Workload == "semaphore" && ev.Reg == history.Fenced, "no fenced op under a permit: %+v", ev)
			if ev.Reg == history.Fenced && !ev.Read {
				fencedWrites++
			}
		case history.End:
			require.Contains(t, grants, k, "%+v", ev)
			grants[k].ends = append(grants[k].ends, ev)
			if ev.How == "done" {
				lost++
			}
		case history.Released:
			require.Contains(t, grants, k, "%+v", ev)
			grants[k].released++
			assert.Empty(t, ev.Err, "%+v", ev)
		case history.Fail:
			t.Logf("fail: %+v", ev)
		}
	}
	t.Logf("grants per workload: %v; lost: %d; fenced writes: %d; resource records: %d", perWorkload, lost, fencedWrites, nrecords)
	for _, wl := range workloads {
		assert.GreaterOrEqual(t, perWorkload[wl], 3*rounds, wl)
	}
	for id, p := range workers {
		want := rounds
		if id == holder {
			want = 1 // held until SIGTERM, then released
		}
		assert.Equal(t, want, perWorker[id], "w%d's grants", id)
		assert.Equal(t, want, grantsInUse(p.stdout.String()), "w%d's phase lines", id)
	}
	for k, gr := range grants {
		if assert.Len(t, gr.ends, 1, "w%d/g%d: one end", k.w, k.g) && gr.ends[0].How == "unlock" {
			assert.Equal(t, 1, gr.released, "w%d/g%d: released after unlock", k.w, k.g)
		}
	}
	if gr := grants[key{holder, 1}]; assert.NotNil(t, gr) && assert.Len(t, gr.ends, 1) {
		assert.Equal(t, "unlock", gr.ends[0].How, "SIGTERM ends the grant by unlocking it")
	}

	return fencedWrites
}

// checkWorkloadRecords checks the resource's log: no overlap or lost
// update, and the fenced writes all admitted, each lock's in sequence.
func checkWorkloadRecords(t *testing.T, records []history.Record, fencedWrites int) {
	t.Helper()
	writes := 0
	next := make(map[string]int64)
	for _, r := range records {
		assert.Equal(t, history.Write, r.Kind, "fault-free: no overlap or lost update: %+v", r)
		if r.Kind == history.Write {
			writes++
			next[r.Lock]++
			assert.Equal(t, next[r.Lock], r.Value, "the fenced register counts up: %+v", r)
		}
	}
	assert.Equal(t, fencedWrites, writes, "every fenced write the workers made was admitted")
	assert.Positive(t, writes)
}

// build builds the package at dir into out, with the fault seam.
func build(ctx context.Context, t *testing.T, out, dir string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "dlock_faults", "-o", out, dir)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %s:\n%s", dir, b)
}

// proc is a child process, its stdout read as it comes.
type proc struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer // complete once wait returned
	stderr bytes.Buffer
	lines  chan string   // stdout's lines, as they come
	eof    chan struct{} // closed when stdout is read to its end
}

func start(ctx context.Context, t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.CommandContext(ctx, bin, args...), lines: make(chan string, 1024), eof: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "DLOCK_PLANT=", "DLOCK_CLOCK_RATE=")
	p.cmd.Stderr = &p.stderr
	out, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	go p.read(out)
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.wait()
		}
	})
	return p
}

// read copies stdout into p.stdout and p.lines (dropping lines nobody
// waits for once the channel is full), until EOF.
func (p *proc) read(out io.Reader) {
	defer close(p.eof)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		p.stdout.WriteString(sc.Text() + "\n")
		select {
		case p.lines <- sc.Text():
		default:
		}
	}
}

// waitLine waits for a stdout line with prefix, or EOF or ctx's end.
func (p *proc) waitLine(ctx context.Context, prefix string) bool {
	for {
		select {
		case l := <-p.lines:
			if strings.HasPrefix(l, prefix) {
				return true
			}
		case <-p.eof:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// wait reads stdout to its end and waits for the process's exit.
func (p *proc) wait() error {
	<-p.eof
	return p.cmd.Wait()
}

// startResource starts the resource on a free loopback port and returns
// it with its address.
func startResource(ctx context.Context, t *testing.T, bin, log string) (*proc, string) {
	t.Helper()
	p := start(ctx, t, bin, "-listen", "127.0.0.1:0", "-log", log, "-cap", "dlock-semaphore=2")
	var addr string
	select {
	case l := <-p.lines:
		_, err := fmt.Sscanf(l, "LISTEN %s", &addr)
		require.NoError(t, err, "resource said %q", l)
	case <-p.eof:
		p.wait() // stderr is complete after it
		t.Fatalf("resource exited:\n%s", p.stderr.String())
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	return p, addr
}

// grantsInUse counts the grants a worker's phase lines show in use: the
// distinct N of its "PHASE use N" lines (one after the grant, one after
// each critical section).
func grantsInUse(stdout string) int {
	seen := map[string]bool{}
	for _, line := range strings.Split(stdout, "\n") {
		if g, ok := strings.CutPrefix(line, "PHASE use "); ok {
			seen[g] = true
		}
	}
	return len(seen)
}

// TestKeyCreatedAt: the read before an election's resign finds the term's
// key gone while other candidates' keys remain. The control: a count-only
// read with the same filters still counts the other keys (etcd counts
// before filtering), which is how the first termGone missed every term
// the server took while others campaigned.
func TestKeyCreatedAt(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cli := etcdtest.New(t).Client(t)
	const prefix = "e/"
	var revs []int64
	for _, k := range []string{"e/a", "e/b", "e/c"} {
		resp, err := cli.Put(ctx, k, "")
		require.NoError(t, err)
		revs = append(revs, resp.Header.Revision)
	}
	held, err := keyCreatedAt(ctx, cli, prefix, revs[1])
	require.NoError(t, err)
	assert.True(t, held, "e/b exists")

	_, err = cli.Delete(ctx, "e/b")
	require.NoError(t, err)
	held, err = keyCreatedAt(ctx, cli, prefix, revs[1])
	require.NoError(t, err)
	assert.False(t, held, "e/b was deleted; e/a and e/c remain")

	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly(),
		clientv3.WithMinCreateRev(revs[1]), clientv3.WithMaxCreateRev(revs[1]))
	require.NoError(t, err)
	assert.EqualValues(t, 2, resp.Count, "the control: a filtered count-only read counts every key under the prefix")
}
