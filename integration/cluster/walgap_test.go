package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
)

// TestReadWALAcrossGap: a member that received a snapshot has a gap in its
// WAL (entries 1–5, then the snapshot at 20, then 21–23). Every entry
// must be read: the first version read from the first snapshot record
// that read whole, here the one at 20, and lost 1–5 (the campaign's c3
// found no revoke for leases etcd had revoked).
func TestReadWALAcrossGap(t *testing.T) {
	dir := t.TempDir() + "/wal"
	w, err := wal.Create(zap.NewNop(), dir, nil)
	require.NoError(t, err)
	ents := func(from, to uint64) []*raftpb.Entry {
		var out []*raftpb.Entry
		for i := from; i <= to; i++ {
			out = append(out, &raftpb.Entry{Index: new(i), Term: new(uint64(1)), Type: new(raftpb.EntryType_EntryNormal)})
		}
		return out
	}
	hard := func(commit uint64) *raftpb.HardState {
		return &raftpb.HardState{Term: new(uint64(1)), Commit: new(commit)}
	}
	require.NoError(t, w.Save(hard(5), ents(1, 5)))
	require.NoError(t, w.SaveSnapshot(&walpb.Snapshot{Index: new(uint64(20)), Term: new(uint64(1)), ConfState: &raftpb.ConfState{Voters: []uint64{1}}}))
	require.NoError(t, w.Save(hard(23), ents(21, 23)))
	require.NoError(t, w.Close())

	got, err := readWAL(dir)
	require.NoError(t, err)
	var idx []uint64
	for _, e := range got {
		idx = append(idx, e.GetIndex())
	}
	assert.Equal(t, []uint64{1, 2, 3, 4, 5, 21, 22, 23}, idx)
}
