package check

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
)

// TestReadWALAcrossGap: a member that received snapshots has gaps in its
// WAL. Every committed entry must be read: the first version read from
// the first snapshot record that read whole, and lost everything before a
// member's last gap (the campaign's c3 found no revoke for leases etcd had
// revoked). An entry the member never saw committed is left out: the tail
// an old leader left before a gap (6, 7 at term 2, commit 5) and the last
// tail (33, above the last commit); a local snapshot (at 22) is no gap.
// An entry written again at its index replaces it and the entries after
// it (25 and 26 at term 3, then at term 4: only the latter count).
func TestReadWALAcrossGap(t *testing.T) {
	dir := t.TempDir() + "/wal"
	w, err := wal.Create(zap.NewNop(), dir, nil)
	require.NoError(t, err)
	ents := func(term, from, to uint64) []*raftpb.Entry {
		var out []*raftpb.Entry
		for i := from; i <= to; i++ {
			out = append(out, &raftpb.Entry{Index: new(i), Term: new(term), Type: new(raftpb.EntryType_EntryNormal)})
		}
		return out
	}
	hard := func(term, commit uint64) *raftpb.HardState {
		return &raftpb.HardState{Term: new(term), Commit: new(commit)}
	}
	snap := func(index, term uint64) *walpb.Snapshot {
		return &walpb.Snapshot{Index: new(index), Term: new(term), ConfState: &raftpb.ConfState{Voters: []uint64{1}}}
	}
	require.NoError(t, w.Save(hard(1, 5), ents(1, 1, 5)))
	require.NoError(t, w.Save(hard(2, 5), ents(2, 6, 7))) // never committed here
	require.NoError(t, w.SaveSnapshot(snap(20, 3)))       // received: a gap
	require.NoError(t, w.Save(hard(3, 20), nil))
	require.NoError(t, w.Save(hard(3, 23), ents(3, 21, 23)))
	require.NoError(t, w.SaveSnapshot(snap(22, 3))) // local: no gap
	require.NoError(t, w.Save(hard(3, 24), ents(3, 24, 26)))
	require.NoError(t, w.Save(hard(4, 26), ents(4, 25, 26))) // 25 and 26 overwritten at term 4 before they committed, then committed
	require.NoError(t, w.SaveSnapshot(snap(30, 4)))          // received: a gap
	require.NoError(t, w.Save(hard(4, 32), ents(4, 31, 33)))
	require.NoError(t, w.Close())

	got, err := readWAL(dir)
	require.NoError(t, err)
	var idx [][2]uint64
	for _, e := range got {
		idx = append(idx, [2]uint64{e.GetIndex(), e.GetTerm()})
	}
	assert.Equal(t, [][2]uint64{{1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {21, 3}, {22, 3}, {23, 3}, {24, 3}, {25, 4}, {26, 4}, {31, 4}, {32, 4}}, idx)
}
