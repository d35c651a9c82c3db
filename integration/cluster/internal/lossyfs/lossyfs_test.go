package lossyfs_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/integration/cluster/internal/lossyfs"
	"github.com/dlock-go/dlock/internal/testenv"
)

// mmapEnv makes the test binary a helper process that prints bytes of a
// file as a shared read-only mapping shows them (see mmapped).
const mmapEnv = "LOSSYFS_TEST_MMAP"

func TestMain(m *testing.M) {
	if spec := os.Getenv(mmapEnv); spec != "" {
		os.Exit(mmapHelper(spec))
	}
	goleak.VerifyTestMain(m)
}

// mmapped returns n bytes at off of the file at path as a shared
// read-only mapping shows them, in a child process: a Go process that
// page-faults on a mount it serves itself deadlocks (the fault blocks a
// thread that the garbage collector waits for, while the server's
// goroutines wait for the collector).
func mmapped(t *testing.T, path string, off, n int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %s", mmapEnv, off, n, path))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "mmap helper: %s", stderr.String())
	return string(out)
}

// mmapHelper maps the first off+n bytes of a file (spec "off n path")
// and writes bytes off to off+n to stdout.
func mmapHelper(spec string) int {
	var off, n int
	var path string
	if _, err := fmt.Sscanf(spec, "%d %d %s", &off, &n, &path); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, off+n, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	os.Stdout.Write(m[off : off+n])
	return 0
}

// mount mounts a lossy filesystem over a fresh backing directory and
// unmounts it at cleanup, checking that no mount is left. It skips t
// (fails it under DLOCK_REQUIRE) without root or /dev/fuse.
func mount(t *testing.T) (fsys *lossyfs.FS, mnt, backing string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "fuse", "mounting needs root")
	}
	if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err != nil {
		testenv.Missing(t, "fuse", err.Error())
	} else {
		f.Close()
	}
	dir := t.TempDir()
	mnt, backing = filepath.Join(dir, "mnt"), filepath.Join(dir, "backing")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	require.NoError(t, os.Mkdir(backing, 0o755))
	fsys, err := lossyfs.Mount(mnt, backing)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, fsys.Unmount())
		assert.False(t, mounted(t, mnt), "%s still mounted", mnt)
	})
	require.True(t, mounted(t, mnt))
	return fsys, mnt, backing
}

// mounted reports whether /proc/self/mounts lists a mount on dir.
func mounted(t testing.TB, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	require.NoError(t, err)
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 1 && f[1] == dir {
			return true
		}
	}
	return false
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func TestUnsyncedWriteIsLost(t *testing.T) {
	fsys, mnt, backing := mount(t)
	f, err := os.Create(filepath.Join(mnt, "a"))
	require.NoError(t, err)
	_, err = f.WriteString("hello")
	require.NoError(t, err)

	buf := make([]byte, 5)
	_, err = f.ReadAt(buf, 0)
	require.NoError(t, err)
	assert.Equal(t, "hello", string(buf), "read-your-writes, same descriptor")
	assert.Equal(t, "hello", read(t, filepath.Join(mnt, "a")), "read-your-writes, another descriptor")
	assert.Equal(t, "", read(t, filepath.Join(backing, "a")), "the backing file is created (metadata), still empty")
	assert.EqualValues(t, 5, fsys.Unsynced())

	require.NoError(t, f.Close())
	assert.Equal(t, "hello", read(t, filepath.Join(mnt, "a")), "close persists nothing but keeps the page cache")
	st, err := os.Stat(filepath.Join(mnt, "a"))
	require.NoError(t, err)
	assert.EqualValues(t, 5, st.Size())

	assert.EqualValues(t, 5, fsys.DropUnsynced())
	assert.Equal(t, "", read(t, filepath.Join(mnt, "a")), "a created, never synced file comes back empty")
	assert.EqualValues(t, 0, fsys.Unsynced())
	assert.EqualValues(t, 0, fsys.DropUnsynced())
}

func TestSyncedWriteSurvives(t *testing.T) {
	for name, sync := range map[string]func(*os.File) error{
		"fsync":     (*os.File).Sync,
		"fdatasync": func(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) },
	} {
		t.Run(name, func(t *testing.T) {
			fsys, mnt, backing := mount(t)
			f, err := os.Create(filepath.Join(mnt, "a"))
			require.NoError(t, err)
			defer f.Close()
			_, err = f.WriteString("synced")
			require.NoError(t, err)
			require.NoError(t, sync(f))
			assert.Equal(t, "synced", read(t, filepath.Join(backing, "a")), "written through")

			_, err = f.WriteAt([]byte("SY"), 0)
			require.NoError(t, err)
			_, err = f.WriteString(" and not")
			require.NoError(t, err)
			assert.Equal(t, "SYnced and not", read(t, filepath.Join(mnt, "a")))

			assert.EqualValues(t, 10, fsys.DropUnsynced())
			assert.Equal(t, "synced", read(t, filepath.Join(mnt, "a")))
			buf := make([]byte, 20)
			n, _ := f.ReadAt(buf, 0)
			assert.Equal(t, "synced", string(buf[:n]), "a descriptor open across the drop sees it too (kernel cache invalidated)")
		})
	}
}

func TestTruncate(t *testing.T) {
	fsys, mnt, backing := mount(t)
	path := filepath.Join(mnt, "a")
	orig := bytes.Repeat([]byte("0123456789"), 1000) // 10000 bytes, 3 pages
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Write(orig)
	require.NoError(t, err)
	require.NoError(t, f.Sync())

	require.NoError(t, f.Truncate(100))
	assert.Equal(t, orig[:100], []byte(read(t, path)))
	require.NoError(t, f.Truncate(5000))
	_, err = f.WriteAt([]byte("x"), 8000)
	require.NoError(t, err)
	want := append(append(bytes.Clone(orig[:100]), make([]byte, 7900)...), 'x')
	assert.Equal(t, want, []byte(read(t, path)), "bytes truncated away read as zeros when the file grows again")
	assert.Equal(t, orig, []byte(read(t, filepath.Join(backing, "a"))), "the backing file is untouched")

	assert.EqualValues(t, 1, fsys.DropUnsynced())
	assert.Equal(t, orig, []byte(read(t, path)), "an unsynced truncation is lost")

	// O_TRUNC is a truncation like any other.
	g, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, g.Close())
	assert.Equal(t, "", read(t, path))
	fsys.DropUnsynced()
	assert.Equal(t, orig, []byte(read(t, path)))

	// A synced truncation stays.
	require.NoError(t, f.Truncate(100))
	require.NoError(t, f.Sync())
	assert.EqualValues(t, 0, fsys.DropUnsynced())
	assert.Equal(t, orig[:100], []byte(read(t, path)))
	assert.Equal(t, orig[:100], []byte(read(t, filepath.Join(backing, "a"))))

	// truncate(2) by path, with no descriptor.
	require.NoError(t, os.Truncate(path, 10))
	assert.Equal(t, orig[:10], []byte(read(t, path)))
	fsys.DropUnsynced()
	assert.Equal(t, orig[:100], []byte(read(t, path)))
}

func TestMmapSeesUnsyncedWrites(t *testing.T) {
	fsys, mnt, _ := mount(t)
	f, err := os.Create(filepath.Join(mnt, "a"))
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Truncate(8192))
	_, err = f.WriteAt([]byte("bolt"), 4096)
	require.NoError(t, err)
	assert.Equal(t, "bolt", mmapped(t, f.Name(), 4096, 4))
	assert.EqualValues(t, 4, fsys.DropUnsynced())
}

func TestMetadataPassesThrough(t *testing.T) {
	fsys, mnt, backing := mount(t)
	require.NoError(t, os.Mkdir(filepath.Join(mnt, "d"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "d", "a.tmp"), []byte("unsynced"), 0o600))
	require.NoError(t, os.Rename(filepath.Join(mnt, "d", "a.tmp"), filepath.Join(mnt, "d", "a")))
	d, err := os.Open(filepath.Join(mnt, "d"))
	require.NoError(t, err)
	assert.NoError(t, d.Sync(), "a directory can be fsynced (as etcd does its WAL's)")
	require.NoError(t, d.Close())
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "b"), nil, 0o600))
	require.NoError(t, os.Remove(filepath.Join(mnt, "b")))

	assert.Equal(t, "unsynced", read(t, filepath.Join(mnt, "d", "a")), "renamed with its unsynced data")
	assert.Equal(t, "", read(t, filepath.Join(backing, "d", "a")), "renamed in the backing directory at once")
	assert.NoFileExists(t, filepath.Join(backing, "b"))

	assert.EqualValues(t, 8, fsys.DropUnsynced())
	assert.Equal(t, "", read(t, filepath.Join(mnt, "d", "a")), "the rename survives, the data does not")
	assert.NoFileExists(t, filepath.Join(mnt, "b"))
}

// TestOtherMountNamespace checks that a process that ip netns exec
// starts after Mount (in a mount namespace of its own) sees the mount,
// and that Unmount stays bounded while such a process holds a file open.
func TestOtherMountNamespace(t *testing.T) {
	fsys, mnt, _ := mount(t)
	ip, err := exec.LookPath("ip")
	if err != nil {
		testenv.Missing(t, "ip", err.Error())
	}
	ns := "lossyfs-test-" + strconv.Itoa(os.Getpid())
	if out, err := exec.Command(ip, "netns", "add", ns).CombinedOutput(); err != nil {
		testenv.Missing(t, "ip", "ip netns add: "+string(out))
	}
	t.Cleanup(func() { exec.Command(ip, "netns", "del", ns).Run() })
	path := filepath.Join(mnt, "a")
	require.NoError(t, os.WriteFile(path, []byte("unsynced"), 0o644))

	out, err := exec.Command(ip, "netns", "exec", ns, "sh", "-c", `readlink /proc/self/ns/mnt; cat "$1"`, "sh", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	self, err := os.Readlink("/proc/self/ns/mnt")
	require.NoError(t, err)
	nsMnt, content, _ := strings.Cut(string(out), "\n")
	assert.NotEqual(t, self, nsMnt, "ip netns exec runs in a mount namespace of its own")
	assert.Equal(t, "unsynced", content, "and sees the mount and its unsynced data")

	// A process in the other namespace holding a file open keeps the
	// FUSE connection; Unmount must not wait for it.
	holder := exec.Command(ip, "netns", "exec", ns, "sh", "-c", `exec 3<"$1"; echo ready; exec sleep 60`, "sh", path)
	holder.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := holder.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, holder.Start())
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)

	start := time.Now()
	assert.NoError(t, fsys.Unmount())
	took := time.Since(start)
	t.Logf("unmount with a holder in another mount namespace: %v", took)
	assert.Less(t, took, 2*lossyfs.UnmountTimeout)
	assert.False(t, mounted(t, mnt))
}

// TestLookupSeesUnsyncedSize checks that the attributes a lookup or a
// readdirplus gives the kernel carry the unsynced size: a stale one
// would shrink the kernel's idea of the file, and an mmap beyond it
// faults with SIGBUS (bbolt's, as etcd --unsafe-no-fsync showed).
func TestLookupSeesUnsyncedSize(t *testing.T) {
	fsys, mnt, _ := mount(t)
	path := filepath.Join(mnt, "a")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt([]byte("x"), 8191)
	require.NoError(t, err)

	_, err = os.ReadDir(mnt) // readdirplus: a lookup of every entry
	require.NoError(t, err)
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.EqualValues(t, 8192, st.Size())
	require.NoError(t, os.Link(path, filepath.Join(mnt, "b")))
	st, err = os.Stat(filepath.Join(mnt, "b"))
	require.NoError(t, err)
	assert.EqualValues(t, 8192, st.Size(), "a hard link shares the unsynced state")

	assert.Equal(t, "x", mmapped(t, path, 8191, 1), "no SIGBUS")
	assert.EqualValues(t, 1, fsys.DropUnsynced())
}

func TestStallHoldsFsync(t *testing.T) {
	fsys, mnt, backing := mount(t)
	f, err := os.Create(filepath.Join(mnt, "a"))
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteString("hello")
	require.NoError(t, err)

	fsys.Stall()
	fsys.Stall() // idempotent
	synced := make(chan error, 1)
	go func() { synced <- f.Sync() }()
	require.Eventually(t, func() bool { return fsys.Stalled() == 1 }, 5*time.Second, time.Millisecond, "the fsync reaches the gate")
	// The kernel holds the file's inode lock through its fsync: writes
	// to that file wait (as on a disk whose flush hangs); other files'
	// do not.
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "b"), []byte("other"), 0o644), "writes go on during a stall")
	assert.Equal(t, "other", read(t, filepath.Join(mnt, "b")), "reads too")
	assert.Equal(t, "", read(t, filepath.Join(backing, "b")))
	select {
	case err := <-synced:
		t.Fatalf("fsync returned during the stall: %v", err)
	default:
	}
	assert.Equal(t, "", read(t, filepath.Join(backing, "a")), "nothing durable during the stall")

	assert.Equal(t, 1, fsys.Unstall())
	require.NoError(t, <-synced)
	assert.Equal(t, 0, fsys.Stalled())
	assert.Equal(t, 0, fsys.Unstall(), "no stall left")
	assert.Equal(t, "hello", read(t, filepath.Join(backing, "a")), "the held fsync synced the file's state")
	require.NoError(t, f.Sync(), "no stall: fsync at once")
}

func TestUnmountEndsStall(t *testing.T) {
	fsys, mnt, _ := mount(t)
	f, err := os.Create(filepath.Join(mnt, "a"))
	require.NoError(t, err)
	_, err = f.WriteString("x")
	require.NoError(t, err)
	fsys.Stall()
	synced := make(chan error, 1)
	go func() { synced <- f.Sync() }()
	require.Eventually(t, func() bool { return fsys.Stalled() == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, fsys.Unmount(), "a held fsync does not keep the server alive")
	<-synced
	f.Close() // ENOTCONN: the connection is gone
}
