package lossyfs

import (
	"errors"
	"io"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
)

// pageSize is the granularity of the unsynced state.
const pageSize = 4096

// file is the unsynced state of one backing inode, shared by all its
// descriptors and names: the page cache of the model. A file is clean
// (bf is nil: the backing file is the truth) or dirty: its content is
// then, below size, the dirty page where there is one, else the backing
// file below base, else zeros. Invariants while dirty: base <= size and
// base <= the backing file's size; the bytes of a page at and beyond
// size are zero.
//
// The methods are called with mu held.
type file struct {
	mu    sync.Mutex
	ino   uint64                   // backing inode number, the key in FS.files
	inode atomic.Pointer[fs.Inode] // the last node seen for it, to invalidate the kernel's cache

	bf       *os.File // the backing file, read-write; non-nil iff dirty
	bsize    int64    // the backing file's size
	size     int64    // the logical size
	base     int64    // backing bytes at and beyond base are truncated away
	pages    map[int64]*[pageSize]byte
	unsynced int64 // bytes written since the last sync
}

// begin makes f dirty, with open giving the backing file (read-write)
// unless f is dirty already.
func (f *file) begin(open func() (*os.File, error)) syscall.Errno {
	if f.bf != nil {
		return 0
	}
	bf, err := open()
	if err != nil {
		return fs.ToErrno(err)
	}
	st, err := bf.Stat()
	if err != nil {
		bf.Close()
		return fs.ToErrno(err)
	}
	f.bf, f.bsize, f.size, f.base = bf, st.Size(), st.Size(), st.Size()
	f.pages = map[int64]*[pageSize]byte{}
	return 0
}

// page returns dirty page i, creating it from what the file holds there.
func (f *file) page(i int64) (*[pageSize]byte, syscall.Errno) {
	if p := f.pages[i]; p != nil {
		return p, 0
	}
	p := new([pageSize]byte)
	if n := min(f.base-i*pageSize, pageSize); n > 0 {
		if _, err := f.bf.ReadAt(p[:n], i*pageSize); err != nil && !errors.Is(err, io.EOF) {
			return nil, fs.ToErrno(err)
		}
	}
	f.pages[i] = p
	return p, 0
}

// write writes data at off into the dirty state.
func (f *file) write(data []byte, off int64) syscall.Errno {
	end := off + int64(len(data))
	for pos := off; len(data) > 0; {
		p, errno := f.page(pos / pageSize)
		if errno != 0 {
			return errno
		}
		n := copy(p[pos%pageSize:], data)
		data, pos = data[n:], pos+int64(n)
	}
	f.size = max(f.size, end)
	f.unsynced += end - off
	return 0
}

// truncate sets the logical size to sz.
func (f *file) truncate(sz int64) {
	if sz < f.size {
		for i := range f.pages {
			if i*pageSize >= sz {
				delete(f.pages, i)
			}
		}
		if p := f.pages[sz/pageSize]; p != nil {
			clear(p[sz%pageSize:])
		}
		f.base = min(f.base, sz)
	}
	f.size = sz
}

// read reads the dirty state at off into buf; it returns the number of
// bytes read, short at the end of the file.
func (f *file) read(buf []byte, off int64) (int, syscall.Errno) {
	if off >= f.size {
		return 0, 0
	}
	end := min(off+int64(len(buf)), f.size)
	for pos := off; pos < end; {
		n := min(pageSize-pos%pageSize, end-pos)
		dst := buf[pos-off : pos-off+n]
		if p := f.pages[pos/pageSize]; p != nil {
			copy(dst, p[pos%pageSize:])
		} else {
			m := max(min(f.base-pos, n), 0)
			if m > 0 {
				if _, err := f.bf.ReadAt(dst[:m], pos); err != nil && !errors.Is(err, io.EOF) {
					return 0, fs.ToErrno(err)
				}
			}
			clear(dst[m:])
		}
		pos += n
	}
	return int(end - off), 0
}

// sync writes the dirty state through to the backing file and makes f
// clean. On an error f stays dirty (a later sync writes it all again).
func (f *file) sync() syscall.Errno {
	if f.bf == nil {
		return 0
	}
	if f.base < f.bsize {
		if err := f.bf.Truncate(f.base); err != nil {
			return fs.ToErrno(err)
		}
		f.bsize = f.base
	}
	for _, i := range slices.Sorted(maps.Keys(f.pages)) {
		start := i * pageSize
		if start >= f.size {
			continue
		}
		n := min(pageSize, f.size-start)
		if _, err := f.bf.WriteAt(f.pages[i][:n], start); err != nil {
			return fs.ToErrno(err)
		}
		f.bsize = max(f.bsize, start+n)
	}
	if f.bsize != f.size {
		if err := f.bf.Truncate(f.size); err != nil {
			return fs.ToErrno(err)
		}
	}
	f.reset()
	return 0
}

// drop discards the dirty state and returns the bytes written since the
// last sync; dirty reports whether there was any.
func (f *file) drop() (lost int64, dirty bool) {
	lost, dirty = f.unsynced, f.bf != nil
	f.reset()
	return lost, dirty
}

func (f *file) reset() {
	if f.bf != nil {
		f.bf.Close()
	}
	f.bf, f.pages, f.unsynced = nil, nil, 0
}

// patch overrides a backing file's size and block count with the logical
// ones if f is dirty.
func (f *file) patch(size, blocks *uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bf != nil {
		*size = uint64(f.size)
		*blocks = (uint64(f.size) + 511) / 512
	}
}
