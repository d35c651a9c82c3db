package lossyfs

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// UnmountTimeout bounds each of Unmount's two waits for the FUSE server
// to stop (after the unmount, then after an abort of the connection).
const UnmountTimeout = 5 * time.Second

// FS is a mounted lossy filesystem. Its methods are safe for concurrent
// use.
type FS struct {
	mountpoint string
	conn       string // the FUSE connection's name in fusectl
	server     *fuse.Server
	served     chan struct{} // closed when server.Serve has returned

	mu    sync.Mutex
	files map[uint64]*file // by backing inode number

	stall struct {
		sync.Mutex
		gate    chan struct{} // non-nil while a stall lasts; closed when it ends
		waiting int           // fsyncs held at the gate now
		held    int           // fsyncs held since the stall began
	}

	unmount struct {
		once sync.Once
		err  error
	}
}

// Mount mounts a lossy view of the directory backing on mountpoint (both
// must exist) and serves it until Unmount. It needs root: it calls
// mount(2) itself (go-fuse's DirectMount, falling back to fusermount),
// with allow_other so that every user and mount namespace made later
// can use it.
func Mount(mountpoint, backing string) (*FS, error) {
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, fmt.Errorf("lossyfs: %w", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, fmt.Errorf("lossyfs: backing: %w", err)
	}
	fsys := &FS{mountpoint: mountpoint, served: make(chan struct{}), files: map[uint64]*file{}}
	root := &node{LoopbackNode: fs.LoopbackNode{RootData: &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}}, fsys: fsys}
	root.RootData.RootNode = root
	timeout := time.Second
	opts := &fs.Options{
		EntryTimeout: &timeout, AttrTimeout: &timeout, NegativeTimeout: &timeout,
		MountOptions: fuse.MountOptions{AllowOther: true, DirectMount: true, FsName: backing, Name: "lossyfs"},
	}
	srv, err := fuse.NewServer(fs.NewNodeFS(root, opts), mountpoint, &opts.MountOptions)
	if err != nil {
		return nil, fmt.Errorf("lossyfs: mount %s: %w", mountpoint, err)
	}
	fsys.server = srv
	go func() {
		defer close(fsys.served)
		srv.Serve()
	}()
	if err := srv.WaitMount(); err != nil {
		fsys.Unmount()
		return nil, fmt.Errorf("lossyfs: mount %s: %w", mountpoint, err)
	}
	if err := syscall.Stat(mountpoint, &st); err != nil {
		fsys.Unmount()
		return nil, fmt.Errorf("lossyfs: mount %s: %w", mountpoint, err)
	}
	// fusectl names a connection by its device number, kernel-encoded.
	fsys.conn = strconv.FormatUint(uint64(unix.Major(st.Dev))<<20|uint64(unix.Minor(st.Dev)), 10)
	return fsys, nil
}

// Unsynced returns the number of bytes written to files and not synced
// yet: what DropUnsynced would lose now.
func (f *FS) Unsynced() int64 {
	var n int64
	for _, fl := range f.states() {
		fl.mu.Lock()
		n += fl.unsynced
		fl.mu.Unlock()
	}
	return n
}

// DropUnsynced discards every unsynced write and truncation, as a power
// loss does, and returns the number of bytes written since their files'
// last sync (a byte written twice counts twice). Call it once every
// process using the mount is dead; a live one would go on from a state
// it never saw.
func (f *FS) DropUnsynced() int64 {
	var lost int64
	var stale []*fs.Inode
	for _, fl := range f.states() {
		fl.mu.Lock()
		n, dirty := fl.drop()
		fl.mu.Unlock()
		lost += n
		if in := fl.inode.Load(); dirty && in != nil {
			stale = append(stale, in)
		}
	}
	select {
	case <-f.served: // no server to tell the kernel
	default:
		for _, in := range stale {
			in.NotifyContent(0, 0) // drop the kernel's pages and attributes; ENOENT if it forgot the inode
		}
	}
	return lost
}

// Unmount unmounts the filesystem and stops serving it, within about
// twice UnmountTimeout. It aborts the FUSE connection (umount -f): a
// process still using the mount, in this mount namespace or another,
// gets ENOTCONN, rather than keep the connection, and Unmount, waiting
// forever. If the server still has not stopped, it aborts the
// connection through fusectl, and then returns an error (leaving the
// server's goroutines behind). The unsynced state is kept: DropUnsynced
// still works. Unmount is idempotent.
func (f *FS) Unmount() error {
	f.unmount.once.Do(func() { f.unmount.err = f.stop() })
	return f.unmount.err
}

// Stall makes every fsync and fdatasync on the mount block from now
// until Unstall (or Unmount), as a disk whose flushes hang: writes still
// go to the page cache, but nothing becomes durable and the syncing
// process waits. A sync interrupted by a signal (its process killed)
// returns EINTR. Stalling a stalled mount does nothing.
func (f *FS) Stall() {
	f.stall.Lock()
	defer f.stall.Unlock()
	if f.stall.gate == nil {
		f.stall.gate, f.stall.held = make(chan struct{}), 0
	}
}

// Unstall ends a stall: the held syncs proceed. It returns how many
// syncs the stall held (0 if there was none).
func (f *FS) Unstall() int {
	f.stall.Lock()
	defer f.stall.Unlock()
	if f.stall.gate == nil {
		return 0
	}
	close(f.stall.gate)
	f.stall.gate = nil
	return f.stall.held
}

// Stalled returns how many syncs are held at a stall now.
func (f *FS) Stalled() int {
	f.stall.Lock()
	defer f.stall.Unlock()
	return f.stall.waiting
}

// gate waits while a stall lasts, or until ctx ends (EINTR).
func (f *FS) gate(ctx context.Context) syscall.Errno {
	f.stall.Lock()
	g := f.stall.gate
	if g == nil {
		f.stall.Unlock()
		return 0
	}
	f.stall.waiting++
	f.stall.held++
	f.stall.Unlock()
	defer func() {
		f.stall.Lock()
		f.stall.waiting--
		f.stall.Unlock()
	}()
	select {
	case <-g:
		return 0
	case <-ctx.Done():
		return syscall.EINTR
	}
}

func (f *FS) stop() error {
	f.Unstall() // a held sync would keep its request, and the server, alive
	if err := syscall.Unmount(f.mountpoint, syscall.MNT_FORCE); err != nil {
		syscall.Unmount(f.mountpoint, syscall.MNT_DETACH) // busy here: detach, the connection is aborted anyway
	}
	select {
	case <-f.served:
		return nil
	case <-time.After(UnmountTimeout):
	}
	err := f.abort()
	select {
	case <-f.served:
		return nil
	case <-time.After(UnmountTimeout):
		return fmt.Errorf("lossyfs: unmount %s: the FUSE server did not stop within %v (fusectl abort: %v)", f.mountpoint, 2*UnmountTimeout, err)
	}
}

// abort aborts the FUSE connection through fusectl, mounted for the
// purpose on a temporary directory.
func (f *FS) abort() error {
	if f.conn == "" {
		return fmt.Errorf("connection unknown")
	}
	dir, err := os.MkdirTemp("", "lossyfs-fusectl-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	if err := syscall.Mount("fusectl", dir, "fusectl", 0, ""); err != nil {
		return err
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	return os.WriteFile(filepath.Join(dir, f.conn, "abort"), []byte("1"), 0)
}

func (f *FS) states() []*file {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Collect(maps.Values(f.files))
}

// file returns the state of backing inode ino, creating it clean.
func (f *FS) file(ino uint64, inode *fs.Inode) *file {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.files[ino]
	if fl == nil {
		fl = &file{ino: ino}
		f.files[ino] = fl
	}
	fl.inode.Store(inode)
	return fl
}

// state returns h's file, or else the state of a regular file ino if it
// has one.
func (f *FS) state(h *handle, mode uint32, ino uint64) *file {
	if h != nil {
		return h.f
	}
	if mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.files[ino]
}

// patch overrides the size of a regular file ino in a with its logical
// one if it has unsynced changes.
func (f *FS) patch(mode uint32, ino uint64, a *fuse.Attr) {
	if st := f.state(nil, mode, ino); st != nil {
		st.patch(&a.Size, &a.Blocks)
	}
}

// forget forgets the state of inode ino, whose last name is gone.
func (f *FS) forget(ino uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.files, ino)
}

// handle wraps a loopback file of inode opened by Open or Create.
func (f *FS) handle(inode *fs.Inode, fh fs.FileHandle) (*handle, syscall.Errno) {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return nil, syscall.EIO
	}
	fd, _ := lf.PassthroughFd()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	return &handle{lf: lf, fd: fd, f: f.file(st.Ino, inode), fsys: f}, 0
}
