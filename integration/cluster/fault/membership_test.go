package fault

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// flakyMembers is a member list whose calls fail as a loaded cluster's
// do: a list that times out, a change applied whose reply is lost.
type flakyMembers struct {
	clientv3.Cluster // the methods the test does not use: nil, panic if called
	members          []*etcdserverpb.Member
	listFails        int  // this many lists fail before one answers
	loseReply        bool // the next change is applied and its reply lost
	next             uint64
}

var errTimeout = errors.New("context deadline exceeded")

func (f *flakyMembers) MemberList(context.Context, ...clientv3.OpOption) (*clientv3.MemberListResponse, error) {
	if f.listFails > 0 {
		f.listFails--
		return nil, errTimeout
	}
	return &clientv3.MemberListResponse{Members: slices.Clone(f.members)}, nil
}

func (f *flakyMembers) MemberRemove(_ context.Context, id uint64) (*clientv3.MemberRemoveResponse, error) {
	f.members = slices.DeleteFunc(f.members, func(m *etcdserverpb.Member) bool { return m.ID == id })
	return reply(f, &clientv3.MemberRemoveResponse{})
}

func (f *flakyMembers) MemberAdd(_ context.Context, urls []string) (*clientv3.MemberAddResponse, error) {
	for _, m := range f.members {
		for _, u := range urls {
			if slices.Contains(m.PeerURLs, u) {
				return nil, errors.New("etcdserver: Peer URLs already exists")
			}
		}
	}
	f.next++
	m := &etcdserverpb.Member{ID: f.next, PeerURLs: urls}
	f.members = append(f.members, m)
	return reply(f, &clientv3.MemberAddResponse{Member: m})
}

// reply returns r, or loses it (the change stays applied) once.
func reply[T any](f *flakyMembers, r T) (T, error) {
	if f.loseReply {
		f.loseReply = false
		var zero T
		return zero, errTimeout
	}
	return r, nil
}

func TestMembershipChangesSurviveLostReplies(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const url = "http://10.1.0.4:2380"
	started := func() []*etcdserverpb.Member {
		return []*etcdserverpb.Member{
			{ID: 1, Name: "m0", PeerURLs: []string{"http://10.1.0.1:2380"}},
			{ID: 4, Name: "m3", PeerURLs: []string{url}},
		}
	}

	// A list that fails is not "removed": the member is removed by a
	// later try, and the add then succeeds.
	f := &flakyMembers{members: started(), listFails: 1, next: 100}
	if err := removeMember(ctx, f, 4); err != nil {
		t.Fatalf("remove after a failed list: %v", err)
	}
	if slices.ContainsFunc(f.members, func(m *etcdserverpb.Member) bool { return m.ID == 4 }) {
		t.Fatalf("removeMember returned with member 4 still listed: %v", f.members)
	}

	// An add applied whose reply was lost: the retry finds it and takes
	// its ID instead of failing on "Peer URLs already exists".
	f.loseReply = true
	id, err := addMember(ctx, f, url)
	if err != nil {
		t.Fatalf("add after a lost reply: %v", err)
	}
	if id != 101 || len(f.members) != 2 {
		t.Fatalf("add after a lost reply: id %d, members %v; want the one add, id 101", id, f.members)
	}

	// A started member on the URL is not taken for the add: it was not
	// removed, and addMember says so (until its 15 s run out).
	f = &flakyMembers{members: started()}
	short, cancel2 := context.WithTimeout(ctx, time.Second)
	defer cancel2()
	if _, err := addMember(short, f, url); err == nil {
		t.Fatalf("add over a started member on the same URL succeeded")
	}
}
