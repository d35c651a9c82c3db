package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// The evidence for etcd's stale-leader revoke (docs/faults.md, "Exempt"):
// which member proposed the revoke that took a lease, and whether it led
// the term in which the revoke was committed. etcd gives every request an
// ID whose top 16 bits are the low 16 bits of the proposing member's ID
// (pkg/idutil: the generator's prefix), so a committed LeaseRevoke names
// its proposer; the members' logs name each term's leader (raft's
// "elected leader X at term T").

// revoke is the first committed LeaseRevoke of a lease.
type revoke struct {
	Index, Term uint64
	Lease       int64
	From        uint16 // the proposer's member ID, low 16 bits
}

// evidence is what the members left: every lease's first revoke, and each
// term's leader (member ID, low 16 bits).
type evidence struct {
	revokes map[int64]revoke
	leaders map[uint64]uint16
	led     map[uint16][]uint64 // the terms each member led
	err     error               // why there is none
}

// readEvidence reads the members' WALs (the data under etcdDir, after the
// members stopped) and logs (etcdDir/logs).
func readEvidence(etcdDir string) evidence {
	ev := evidence{revokes: map[int64]revoke{}, leaders: map[uint64]uint16{}, led: map[uint16][]uint64{}}
	var dirs []string
	for _, pat := range []string{"*/data/member/wal", "*/backing/data/member/wal"} {
		m, _ := filepath.Glob(filepath.Join(etcdDir, pat))
		dirs = append(dirs, m...)
	}
	if len(dirs) == 0 {
		ev.err = fmt.Errorf("no WAL under %s", etcdDir)
		return ev
	}
	// Per raft index, the entry of the highest term: a lower one was
	// overwritten (an old leader's uncommitted tail).
	byIndex := map[uint64]*raftpb.Entry{}
	for _, d := range dirs {
		ents, err := readWAL(d)
		if err != nil {
			ev.err = fmt.Errorf("%s: %w", d, err)
			continue
		}
		for _, e := range ents {
			if have, ok := byIndex[e.GetIndex()]; !ok || e.GetTerm() > have.GetTerm() {
				byIndex[e.GetIndex()] = e
			}
		}
	}
	idx := make([]uint64, 0, len(byIndex))
	for i := range byIndex {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range idx {
		e := byIndex[i]
		if e.GetType() != raftpb.EntryType_EntryNormal || len(e.GetData()) == 0 {
			continue
		}
		var r pb.InternalRaftRequest
		if proto.Unmarshal(e.GetData(), &r) != nil || r.GetLeaseRevoke() == nil || r.GetHeader() == nil {
			continue
		}
		id := r.GetLeaseRevoke().GetID()
		if _, seen := ev.revokes[id]; !seen {
			ev.revokes[id] = revoke{Index: e.GetIndex(), Term: e.GetTerm(), Lease: id, From: uint16(r.GetHeader().GetID() >> 48)}
		}
	}
	logs, _ := filepath.Glob(filepath.Join(etcdDir, "logs", "*.log"))
	for _, l := range logs {
		if err := ev.readLog(l); err != nil {
			ev.err = err
		}
	}
	return ev
}

// readWAL returns the entries of the WAL in dir. A member that received a
// snapshot (cut off, or added back empty) has a gap in its WAL: etcd's
// reader stops at the gap (ErrSliceOutOfRange, with the entries before it)
// and reads past it only when opened at the snapshot after the gap, so
// the WAL is read in stretches, each from the first snapshot record not
// yet covered. (Reading only from the first snapshot that read whole
// lost every entry before a member's last gap: the campaign's c3 found no
// revoke for leases etcd had revoked.)
func readWAL(dir string) ([]*raftpb.Entry, error) {
	snaps, err := wal.ValidSnapshotEntries(zap.NewNop(), dir)
	if err != nil {
		return nil, err
	}
	var out []*raftpb.Entry
	var last error
	covered := uint64(0) // entries up to this index are read
	for i, sn := range snaps {
		if i > 0 && sn.GetIndex() <= covered {
			continue
		}
		w, err := wal.OpenForRead(zap.NewNop(), dir, sn)
		if err != nil {
			last = err
			continue
		}
		_, _, ents, err := w.ReadAll()
		w.Close()
		if err != nil && !errors.Is(err, wal.ErrSliceOutOfRange) {
			last = err
			continue
		}
		out = append(out, ents...)
		if len(ents) > 0 {
			covered = max(covered, ents[len(ents)-1].GetIndex())
		}
		if err == nil {
			return out, nil // read to the end
		}
		last = err
	}
	if len(out) > 0 {
		return out, nil
	}
	return nil, last
}

var electedRE = regexp.MustCompile(`elected leader ([0-9a-f]+) at term ([0-9]+)`)

// readLog notes each term's leader from a member's log.
func (ev *evidence) readLog(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		m := electedRE.FindSubmatch(sc.Bytes())
		if m == nil {
			continue
		}
		id, err1 := strconv.ParseUint(string(m[1]), 16, 64)
		term, err2 := strconv.ParseUint(string(m[2]), 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if _, ok := ev.leaders[term]; !ok {
			ev.leaders[term] = uint16(id)
			ev.led[uint16(id)] = append(ev.led[uint16(id)], term)
		}
	}
	return sc.Err()
}

// staleRevoke returns the evidence that lease was taken by etcd's
// stale-leader revoke: its first committed revoke was proposed by a
// member that had led an earlier term and did not lead the revoke's term.
// A client's revoke (a session's Close) through a follower is proposed by
// a member that does not lead either; that is why it must have led before,
// and why only the first revoke counts (the one that took the keys, while
// the holder still acted, so before any Close of its). "" if there is no
// such evidence.
func (ev evidence) staleRevoke(lease int64) string {
	if lease == 0 {
		return ""
	}
	r, ok := ev.revokes[lease]
	if !ok {
		return ""
	}
	leader, known := ev.leaders[r.Term]
	if !known || leader == r.From {
		return ""
	}
	var led uint64 // the last term before the revoke's that r.From led (the logs are read one member after another: unsorted)
	for _, t := range ev.led[r.From] {
		if t < r.Term {
			led = max(led, t)
		}
	}
	if led == 0 {
		return ""
	}
	return fmt.Sprintf("lease %x revoked at raft index %d (term %d) by a request of member …%04x, leader of term %d, while …%04x led",
		lease, r.Index, r.Term, r.From, led, leader)
}
