package env

import (
	"os"
	"path/filepath"

	"github.com/dlock-go/dlock/integration/cluster/internal/lossyfs"
)

// LossyDir is a member's data directory on lossyfs: what the member writes
// without fsync is lost when Drop is called after a SIGKILL (a power
// loss).
type LossyDir struct {
	mnt string
	fs  *lossyfs.FS
}

// MountLossy mounts lossyfs at dir/mnt over dir/backing.
func MountLossy(dir string) (*LossyDir, error) {
	mnt, backing := filepath.Join(dir, "mnt"), filepath.Join(dir, "backing")
	for _, d := range []string{mnt, backing} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	f, err := lossyfs.Mount(mnt, backing)
	if err != nil {
		return nil, err
	}
	return &LossyDir{mnt: mnt, fs: f}, nil
}

// Path is the mountpoint, where the member keeps its data.
func (d *LossyDir) Path() string { return d.mnt }

// Drop discards every unsynced write and returns the bytes lost. Call it
// only once the member's process is dead.
func (d *LossyDir) Drop() int64 { return d.fs.DropUnsynced() }

// Unsynced returns the bytes written and not yet synced.
func (d *LossyDir) Unsynced() int64 { return d.fs.Unsynced() }

// Close unmounts; every process using the mount must be dead.
func (d *LossyDir) Close() error { return d.fs.Unmount() }

// Stall makes every fsync on the disk hang until Unstall.
func (d *LossyDir) Stall() { d.fs.Stall() }

// Unstall ends a stall and returns how many syncs it held.
func (d *LossyDir) Unstall() int { return d.fs.Unstall() }
