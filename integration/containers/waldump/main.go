// Command waldump prints the requests in an etcd member's write-ahead log
// that mention a string, and every lease grant and revoke, one per line
// with its raft index: the order in which the cluster applied them. The
// cluster fault harness keeps each member's data under its artifacts; this
// is how a run's double grant was traced to the request that caused it
// (docs/faults.md).
//
//	go run ./waldump DATA/member/wal dlock-election
package main

import (
	"fmt"
	"os"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: waldump WALDIR STRING")
		os.Exit(2)
	}
	snaps, err := wal.ValidSnapshotEntries(zap.NewNop(), os.Args[1])
	if err != nil {
		panic(err)
	}
	var ents []*raftpb.Entry
	for _, sn := range snaps {
		w, err := wal.OpenForRead(zap.NewNop(), os.Args[1], sn)
		if err != nil {
			continue
		}
		_, _, es, err := w.ReadAll()
		w.Close()
		if err == nil { // the oldest snapshot the log still covers
			fmt.Println("from snapshot", sn.GetIndex(), len(es), "entries")
			ents = es
			break
		}
	}
	filter := os.Args[2]
	for _, e := range ents {
		if e.GetType() != raftpb.EntryType_EntryNormal || len(e.GetData()) == 0 {
			continue
		}
		var r pb.InternalRaftRequest
		if err := proto.Unmarshal(e.GetData(), &r); err != nil {
			continue
		}
		s := r.String()
		if strings.Contains(s, filter) || r.LeaseRevoke != nil || r.LeaseGrant != nil {
			fmt.Printf("%d t%d %s\n", e.GetIndex(), e.GetTerm(), s)
		}
	}
}
