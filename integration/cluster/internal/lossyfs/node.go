package lossyfs

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is a loopback node whose regular files keep their data changes in
// the FS's unsynced state. Metadata operations are the loopback's own.
type node struct {
	fs.LoopbackNode
	fsys *FS
}

var (
	_ fs.NodeWrapChilder = (*node)(nil)
	_ fs.NodeLookuper    = (*node)(nil)
	_ fs.NodeLinker      = (*node)(nil)
	_ fs.NodeOpener      = (*node)(nil)
	_ fs.NodeCreater     = (*node)(nil)
	_ fs.NodeGetattrer   = (*node)(nil)
	_ fs.NodeStatxer     = (*node)(nil)
	_ fs.NodeSetattrer   = (*node)(nil)
	_ fs.NodeUnlinker    = (*node)(nil)
	_ fs.NodeRenamer     = (*node)(nil)
	_ fs.NodeTmpfiler    = (*node)(nil)
)

// WrapChild makes every node of the tree a node.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: fs.LoopbackNode{RootData: n.RootData}, fsys: n.fsys}
}

// path returns the node's path in the backing directory.
func (n *node) path() string { return filepath.Join(n.RootData.Path, n.Path(nil)) }

// Lookup reports the logical size of a file with unsynced changes: the
// kernel takes the attributes of a lookup (and of a readdirplus, made of
// lookups) as fresh, and a stale size would cut off its page cache and
// its mmaps (SIGBUS beyond it).
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, errno := n.LoopbackNode.Lookup(ctx, name, out)
	if errno == 0 {
		n.fsys.patch(out.Mode, out.Ino, &out.Attr)
	}
	return ch, errno
}

// Link reports the logical size of the file linked, as Lookup.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, errno := n.LoopbackNode.Link(ctx, target, name, out)
	if errno == 0 {
		n.fsys.patch(out.Mode, out.Ino, &out.Attr)
	}
	return ch, errno
}

// Open opens the backing file; O_TRUNC becomes an unsynced truncation.
// (The kernel sends O_TRUNC as a separate SETATTR, as go-fuse does not
// ask for atomic O_TRUNC; this covers it anyway.)
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags&^syscall.O_TRUNC)
	if errno != 0 {
		return nil, 0, errno
	}
	h, errno := n.fsys.handle(&n.Inode, fh)
	if errno == 0 && flags&syscall.O_TRUNC != 0 {
		errno = h.truncate(0)
	}
	if errno != 0 {
		fh.(fs.FileReleaser).Release(ctx)
		return nil, 0, errno
	}
	return h, fuseFlags, 0
}

// Create creates the backing file (metadata: at once); O_TRUNC of a file
// that existed becomes an unsynced truncation.
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ch, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags&^syscall.O_TRUNC, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	h, errno := n.fsys.handle(ch, fh)
	if errno == 0 && flags&syscall.O_TRUNC != 0 {
		errno = h.truncate(0)
	}
	if errno != 0 {
		fh.(fs.FileReleaser).Release(ctx)
		return nil, nil, 0, errno
	}
	h.f.patch(&out.Size, &out.Blocks)
	return ch, h, fuseFlags, 0
}

// Getattr reports the logical size of a file with unsynced changes.
func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	h, lf := unwrap(f)
	if errno := n.LoopbackNode.Getattr(ctx, lf, out); errno != 0 {
		return errno
	}
	if st := n.fsys.state(h, out.Mode, out.Ino); st != nil {
		st.patch(&out.Size, &out.Blocks)
	}
	return 0
}

// Statx reports the logical size of a file with unsynced changes.
func (n *node) Statx(ctx context.Context, f fs.FileHandle, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	h, lf := unwrap(f)
	if errno := n.LoopbackNode.Statx(ctx, lf, flags, mask, out); errno != 0 {
		return errno
	}
	if st := n.fsys.state(h, uint32(out.Mode), out.Ino); st != nil {
		st.patch(&out.Size, &out.Blocks)
	}
	return 0
}

// Setattr makes a size change an unsynced truncation and passes the
// other attributes (metadata) through.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	h, lf := unwrap(f)
	if sz, ok := in.GetSize(); ok {
		var errno syscall.Errno
		if h != nil {
			errno = h.truncate(int64(sz))
		} else {
			errno = n.truncate(int64(sz))
		}
		if errno != 0 {
			return errno
		}
		rest := *in
		rest.Valid &^= fuse.FATTR_SIZE
		in = &rest
	}
	if errno := n.LoopbackNode.Setattr(ctx, lf, in, out); errno != 0 {
		return errno
	}
	if st := n.fsys.state(h, out.Mode, out.Ino); st != nil {
		st.patch(&out.Size, &out.Blocks)
	}
	return 0
}

// truncate truncates the node's file, with no descriptor (truncate(2)).
func (n *node) truncate(sz int64) syscall.Errno {
	bf, err := os.OpenFile(n.path(), os.O_RDWR, 0)
	if err != nil {
		return fs.ToErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(bf.Fd()), &st); err != nil {
		bf.Close()
		return fs.ToErrno(err)
	}
	f := n.fsys.file(st.Ino, &n.Inode)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bf != nil {
		bf.Close() // f is dirty already, with a backing file of its own
	} else if errno := f.begin(func() (*os.File, error) { return bf, nil }); errno != 0 {
		return errno
	}
	f.truncate(sz)
	return 0
}

// Unlink removes the name; when it was the file's last, its unsynced
// state is forgotten (open descriptors keep it), so that a new file that
// reuses the inode number starts clean.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	ino, last := lastLink(filepath.Join(n.path(), name))
	if errno := n.LoopbackNode.Unlink(ctx, name); errno != 0 {
		return errno
	}
	if last {
		n.fsys.forget(ino)
	}
	return 0
}

// Rename renames; a regular file replaced by it loses its unsynced state
// as in Unlink.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	var ino uint64
	var last bool
	if np, ok := newParent.(*node); ok && flags&unix.RENAME_EXCHANGE == 0 {
		ino, last = lastLink(filepath.Join(np.path(), newName))
		if src, _ := lastLink(filepath.Join(n.path(), name)); src == ino {
			last = false // two names of one file: rename does nothing
		}
	}
	if errno := n.LoopbackNode.Rename(ctx, name, newParent, newName, flags); errno != 0 {
		return errno
	}
	if last {
		n.fsys.forget(ino)
	}
	return 0
}

// Tmpfile is not supported: an O_TMPFILE file would bypass the model.
func (n *node) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// lastLink reports the inode number of the file at path and whether path
// is a regular file's last name.
func lastLink(path string) (ino uint64, last bool) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return 0, false
	}
	return st.Ino, st.Mode&syscall.S_IFMT == syscall.S_IFREG && st.Nlink == 1
}

// handle is an open regular file: its backing descriptor for what is
// clean, its file's unsynced state for the rest.
type handle struct {
	lf   *fs.LoopbackFile
	fd   int // lf's descriptor
	f    *file
	fsys *FS
}

var (
	_ fs.FileReader    = (*handle)(nil)
	_ fs.FileWriter    = (*handle)(nil)
	_ fs.FileWritever  = (*handle)(nil)
	_ fs.FileFsyncer   = (*handle)(nil)
	_ fs.FileFlusher   = (*handle)(nil)
	_ fs.FileReleaser  = (*handle)(nil)
	_ fs.FileGetattrer = (*handle)(nil)
)

// unwrap returns the handle f is, if any, and the loopback file under it
// (nil if none).
func unwrap(f fs.FileHandle) (*handle, fs.FileHandle) {
	if h, ok := f.(*handle); ok {
		return h, h.lf
	}
	return nil, nil
}

// reopen opens the backing file of h read-write, whatever h's mode and
// even if it was renamed or unlinked since.
func (h *handle) reopen() (*os.File, error) {
	return os.OpenFile("/proc/self/fd/"+strconv.Itoa(h.fd), os.O_RDWR, 0)
}

func (h *handle) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	if h.f.bf == nil {
		n, err := syscall.Pread(h.fd, buf, off)
		if err != nil {
			return nil, fs.ToErrno(err)
		}
		return fuse.ReadResultData(buf[:n]), 0
	}
	n, errno := h.f.read(buf, off)
	if errno != 0 {
		return nil, errno
	}
	return fuse.ReadResultData(buf[:n]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	return h.Writev(ctx, [][]byte{data}, off)
}

func (h *handle) Writev(ctx context.Context, data [][]byte, off int64) (uint32, syscall.Errno) {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	if errno := h.f.begin(h.reopen); errno != 0 {
		return 0, errno
	}
	var n int
	for _, d := range data {
		if errno := h.f.write(d, off+int64(n)); errno != 0 {
			return uint32(n), errno
		}
		n += len(d)
	}
	return uint32(n), 0
}

func (h *handle) truncate(sz int64) syscall.Errno {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	if errno := h.f.begin(h.reopen); errno != 0 {
		return errno
	}
	h.f.truncate(sz)
	return 0
}

// Fsync persists the file's whole unsynced state, whichever descriptor
// it came through (fsync and fdatasync alike), once no stall holds it
// (FS.Stall; it waits outside the file's lock, so writes and reads go on).
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if errno := h.fsys.gate(ctx); errno != 0 {
		return errno
	}
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	return h.f.sync()
}

// Flush (at close) persists nothing.
func (h *handle) Flush(ctx context.Context) syscall.Errno { return h.lf.Flush(ctx) }

// Release closes the backing descriptor; the unsynced state stays.
func (h *handle) Release(ctx context.Context) syscall.Errno { return h.lf.Release(ctx) }

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	if errno := h.lf.Getattr(ctx, out); errno != 0 {
		return errno
	}
	h.f.patch(&out.Size, &out.Blocks)
	return 0
}
