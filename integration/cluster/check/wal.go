package check

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
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
		ents, err := readWAL(d) // with an error, what could be read
		if err != nil {
			ev.err = fmt.Errorf("%s: %w", d, err)
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

// readWAL returns the committed entries of the WAL in dir, record by
// record. Not wal.ReadAll: a member that received a snapshot (cut off, or
// added back empty) has a gap in its WAL, where ReadAll stops; read from
// its last snapshot only, the campaign's c3 found no revoke for leases
// etcd had revoked. And not every entry: before a gap there can be an
// old leader's uncommitted tail that nothing overwrote, and an entry that
// was never committed can even carry a higher term than the committed one
// at its index (raft's figure 8), so it could not be outvoted. An entry
// counts only if the member's commit index (its last HardState) covered
// it while the entry was still in its log: before the gap, or at the end.
// A record that cannot be read ends the reading with what was read so
// far, and its error.
func readWAL(dir string) ([]*raftpb.Entry, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.wal")) // in sequence: the names are hex, fixed width
	if err != nil || len(names) == 0 {
		return nil, cmp.Or(err, fmt.Errorf("no WAL file in %s", dir))
	}
	var readers []fileutil.FileReader
	for _, n := range names {
		f, err := os.Open(n)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		readers = append(readers, fileutil.NewFileReader(f))
	}
	r := &walReader{dec: wal.NewDecoder(readers...)}
	for {
		rec := &walpb.Record{}
		err := r.dec.Decode(rec)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) { // the end, or a torn last write
			break
		}
		if err == nil {
			err = r.apply(rec)
		}
		if err != nil {
			r.keep()
			return r.out, err
		}
	}
	r.keep()
	return r.out, nil
}

// walReader is readWAL's state: the entries found committed so far, the
// stretch of entries since the last gap, and the last commit index seen.
type walReader struct {
	dec    wal.Decoder
	out    []*raftpb.Entry // committed, in the stretches before cur
	cur    []*raftpb.Entry // the stretch since the last gap
	commit uint64          // the last HardState's commit index
}

// apply reads one record: an entry into the stretch, a commit index, a
// snapshot (which, past the stretch, marks a gap) or a CRC to check.
func (r *walReader) apply(rec *walpb.Record) error {
	switch rec.GetType() {
	case wal.EntryType:
		e := &raftpb.Entry{}
		if err := proto.Unmarshal(rec.GetData(), e); err != nil {
			return err
		}
		// An entry at an index already held overwrites it and what
		// follows (cur's indexes ascend: a binary search finds it).
		i, _ := slices.BinarySearchFunc(r.cur, e.GetIndex(), func(c *raftpb.Entry, idx uint64) int { return cmp.Compare(c.GetIndex(), idx) })
		r.cur = append(r.cur[:i], e)
	case wal.StateType:
		st := &raftpb.HardState{}
		if err := proto.Unmarshal(rec.GetData(), st); err != nil {
			return err
		}
		if st.GetCommit() > 0 {
			r.commit = st.GetCommit()
		}
	case wal.SnapshotType:
		sn := &walpb.Snapshot{}
		if err := proto.Unmarshal(rec.GetData(), sn); err != nil {
			return err
		}
		if sn.GetIndex() > r.last() { // a gap: a snapshot received
			r.keep()
		}
	case wal.CrcType:
		if crc := r.dec.LastCRC(); crc != 0 && rec.Validate(crc) != nil {
			return wal.ErrCRCMismatch
		}
		r.dec.UpdateCRC(rec.GetCrc())
	}
	return nil
}

// keep ends the stretch: its entries the commit index covers are
// committed.
func (r *walReader) keep() {
	for _, e := range r.cur {
		if e.GetIndex() <= r.commit {
			r.out = append(r.out, e)
		}
	}
	r.cur = nil
}

// last returns the index of the last entry read (0: none).
func (r *walReader) last() uint64 {
	if len(r.cur) > 0 {
		return r.cur[len(r.cur)-1].GetIndex()
	}
	if len(r.out) > 0 {
		return r.out[len(r.out)-1].GetIndex()
	}
	return 0
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
