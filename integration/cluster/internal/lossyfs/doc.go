// Package lossyfs mounts a loopback FUSE filesystem whose file data is
// durable only once it is synced, so that a test can cut the power under
// a process: writes and truncations of regular files stay in memory (a
// page cache over the backing file) until the file is fsynced or
// fdatasynced, and DropUnsynced discards all of them at once, as a power
// loss does. Anything a process made durable by a sync survives;
// everything else is gone.
//
//	fsys, err := lossyfs.Mount(mnt, backing) // as root
//	// start a process with its data under mnt; SIGKILL it
//	lost := fsys.DropUnsynced()              // the power loss
//	// restart the process on the same data: it sees only synced data
//	err = fsys.Unmount()                     // after every user is dead
//
// What is persisted when:
//
//   - write(2) and truncation (ftruncate, truncate, open with O_TRUNC)
//     of a regular file: kept in memory, per file (per backing inode, so
//     shared by all its descriptors and hard links), until fsync(2) or
//     fdatasync(2) on any descriptor of that file writes the file's
//     whole unsynced state through to the backing file. close(2) does
//     not persist anything: a page cache survives close.
//   - Reads, stat and mmap see the unsynced state through every
//     descriptor (read-your-writes), as with a page cache.
//   - Stall makes every fsync/fdatasync block until Unstall (a disk
//     whose flushes hang); writes and reads go on through the page
//     cache meanwhile.
//   - Metadata goes to the backing directory at once and survives
//     DropUnsynced: create, mkdir, unlink, rmdir, rename, link, symlink,
//     chmod, chown, utimes, xattrs.
//
// # Caveats
//
//   - Metadata is never lost. A real filesystem may lose a directory
//     entry that was not synced (its directory was not fsynced); here a
//     file created and written but never synced comes back present and
//     empty (or with its last synced content). etcd fsyncs its
//     directories (the WAL's) where it depends on them, so this
//     simplification hides none of its guarantees.
//   - A power loss loses every unsynced write, never a subset: no torn
//     pages, no reordering. That is one legal outcome among many.
//   - Only a file's own fsync/fdatasync persists its data; sync(2) and
//     syncfs(2) do not. The backing file itself is not fsynced on the
//     host, whose power does not fail.
//   - fallocate(2) and O_TMPFILE fail with EOPNOTSUPP (etcd falls back
//     to ftruncate); copy_file_range(2) falls back to read and write.
//   - The backing directory must be one filesystem: unsynced state is
//     keyed by backing inode number. It must not be changed behind the
//     mount while mounted.
//   - Mounting needs root and /dev/fuse. The mount is made with
//     allow_other in the caller's mount namespace; a process in another
//     namespace (ip netns exec makes one) sees it if that namespace was
//     made after Mount (with private mount propagation, a later mount
//     does not reach it).
//   - DropUnsynced and Unmount are meant for when every process using
//     the mount is dead (killed and waited for: a dying process's
//     in-flight requests are answered before it is reaped). A live
//     process keeps reading and writing after a drop, and a process in
//     another mount namespace keeps the FUSE connection alive, so that
//     a plain unmount never lets the server stop. Unmount therefore
//     aborts the connection (umount -f; those processes get ENOTCONN)
//     and is bounded in time; kill the users first.
//   - The process that mounts serves the filesystem from its own
//     goroutines. It may use the mount through system calls, but must
//     not page-fault on it (mmap a file of it): the faulting thread
//     blocks the Go garbage collector, which the serving goroutines
//     then wait for, a deadlock. Map files in a child process. If the
//     serving process dies, the mount stays, dead ("transport endpoint
//     is not connected"), until umount -l.
package lossyfs
