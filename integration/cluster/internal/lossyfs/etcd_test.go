package lossyfs_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock/integration/cluster/internal/lossyfs"
	"github.com/dlock-go/dlock/integration/etcdtest"
)

// etcdMember is one etcd process with its data dir on a lossy mount.
type etcdMember struct {
	bin, log string
	args     []string
	url      string
	cmd      *exec.Cmd
	done     chan struct{} // closed when cmd has been waited for
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

func newEtcdMember(t *testing.T, dataDir string) *etcdMember {
	t.Helper()
	client, peer := "http://"+freeAddr(t), "http://"+freeAddr(t)
	m := &etcdMember{
		bin: etcdtest.Binary(t), log: filepath.Join(t.TempDir(), "etcd.log"), url: client,
		args: []string{ // fsync on: no --unsafe-no-fsync
			"--name=m0", "--data-dir=" + dataDir,
			"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=m0=" + peer, "--log-level=error",
		},
	}
	t.Cleanup(func() { // before the mount's cleanup: no process may use the mount then
		m.kill()
		if t.Failed() {
			t.Logf("etcd log: %s", m.logTail())
		}
	})
	return m
}

// start starts the member and waits until it answers.
func (m *etcdMember) start(t *testing.T) {
	t.Helper()
	log, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(t, err)
	defer log.Close()
	m.cmd = exec.Command(m.bin, m.args...)
	m.cmd.Stdout, m.cmd.Stderr = log, log
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, m.cmd.Start())
	m.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(m.cmd, m.done)

	cli := m.client(t)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), etcdtest.StartTimeout)
	defer cancel()
	for {
		sctx, scancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Status(sctx, m.url)
		scancel()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("etcd not ready: %v (log: %s)", err, m.logTail())
		case <-m.done:
			t.Fatalf("etcd exited (log: %s)", m.logTail())
		case <-time.After(20 * time.Millisecond): // polling: etcd has no readiness event
		}
	}
}

func (m *etcdMember) client(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.url}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	return cli
}

// kill SIGKILLs the member (if it runs) and waits until it has exited.
func (m *etcdMember) kill() {
	if m.cmd == nil {
		return
	}
	m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.done
}

func (m *etcdMember) logTail() string {
	b, _ := os.ReadFile(m.log)
	return string(b[max(len(b)-4000, 0):])
}

// crashWhileDirty SIGKILLs the member at a moment when the filesystem
// holds unsynced bytes (the member is stopped to look), so that the
// crash has something to lose; it gives up looking after timeout and
// kills it anyway. It waits until the member has exited: its in-flight
// FUSE requests are answered by then.
func (m *etcdMember) crashWhileDirty(t *testing.T, fsys *lossyfs.FS, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(time.Millisecond) // sampling: the filesystem has no dirty event
	defer tick.Stop()
	for time.Now().Before(deadline) {
		require.NoError(t, m.cmd.Process.Signal(syscall.SIGSTOP))
		if fsys.Unsynced() > 0 {
			break
		}
		require.NoError(t, m.cmd.Process.Signal(syscall.SIGCONT))
		<-tick.C
	}
	m.kill()
}

func value(key string, size int) string {
	return string(bytes.Repeat([]byte(key+";"), size/(len(key)+1)+1)[:size])
}

// TestEtcdSurvivesPowerLoss runs a one-member etcd (fsync on) with its
// data on a lossy mount, crashes it in the middle of writes, drops
// every unsynced byte, restarts it on the same data and checks that
// every acknowledged put is there, for several crashes in a row.
func TestEtcdSurvivesPowerLoss(t *testing.T) {
	const (
		crashes = 3
		keys    = 100       // acknowledged puts before each crash
		bgSize  = 256 << 10 // background values: several FUSE writes each
	)
	fsys, mnt, _ := mount(t)
	m := newEtcdMember(t, filepath.Join(mnt, "etcd"))
	m.start(t)

	acked := map[string]string{} // every acknowledged put: key → value
	var mu sync.Mutex
	var lost int64
	for c := range crashes {
		cli := m.client(t)
		ctx := etcdtest.Context(t)
		for i := range keys {
			k := fmt.Sprintf("k/%d/%03d", c, i)
			_, err := cli.Put(ctx, k, k)
			require.NoError(t, err)
			acked[k] = k
		}

		// Background writes of large values, to be in the middle of
		// some when the crash comes.
		bgCtx, stop := context.WithCancel(ctx)
		started := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; bgCtx.Err() == nil; i++ {
				k := fmt.Sprintf("bg/%d/%05d", c, i)
				pctx, cancel := context.WithTimeout(bgCtx, 2*time.Second)
				_, err := cli.Put(pctx, k, value(k, bgSize))
				cancel()
				if err != nil {
					continue // the member is gone, or stopped and about to be
				}
				mu.Lock()
				acked[k] = value(k, bgSize)
				mu.Unlock()
				if i == 3 {
					close(started)
				}
			}
		})
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("no background put acknowledged")
		}
		m.crashWhileDirty(t, fsys, 10*time.Second)
		stop()
		wg.Wait()
		cli.Close()

		dropped := fsys.DropUnsynced()
		lost += dropped
		t.Logf("crash %d: %d unsynced bytes dropped", c, dropped)

		m.start(t)
		cli = m.client(t)
		missing := 0
		for k, v := range acked {
			resp, err := cli.Get(ctx, k)
			require.NoError(t, err)
			if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != v {
				missing++
			}
		}
		cli.Close()
		assert.Zero(t, missing, "acknowledged puts lost after crash %d", c)
		t.Logf("crash %d: all %d acknowledged puts back", c, len(acked)-missing)
	}
	assert.Positive(t, lost, "no crash lost anything: the test tested nothing")
}
