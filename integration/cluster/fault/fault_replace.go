package fault

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
	"github.com/dlock-go/dlock/integration/cluster/history"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// memberReplace removes a member (the leader half the time) from the
// cluster, wipes it and adds it back empty; the heal restarts it and
// waits until it has caught up. It lasts 0.5 to 2 TTLs.
type memberReplace struct{ always }

func (memberReplace) Name() string                      { return "member-replace" }
func (memberReplace) Duration(n *Nemesis) time.Duration { return n.duration(0.5, 2) }

func (memberReplace) Inject(ctx context.Context, in *injection) (func() error, error) {
	m, l := in.leaderOrFollower(ctx)
	in.f.Targets = []string{m.Name}
	return in.replace(ctx, in.f, m, m == l)
}

// replace removes member m from the cluster (MemberRemove), kills it,
// wipes its data and adds it back as a new member (MemberAdd, same peer
// URL); the returned heal starts it (--initial-cluster-state=existing)
// and waits up to 30 s until it has caught up.
func (n *Nemesis) replace(ctx context.Context, f *history.Fault, m *env.Member, wasLeader bool) (func() error, error) {
	cli, err := n.h.Etcd.Client(m)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	role := "follower"
	if wasLeader {
		role = "leader"
	}
	listed, err := n.ids(ctx, cli)
	if err != nil {
		return nil, fmt.Errorf("member list: %w", err)
	}
	var ids []uint64 // more than one if an earlier add of m never started
	for mid, mm := range listed {
		if mm == m {
			ids = append(ids, mid)
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s not in the member list", m.Name)
	}
	slices.Sort(ids)
	id := ids[0]
	start := time.Now()
	for _, mid := range ids {
		if err := removeMember(ctx, cli, mid); err != nil {
			return nil, fmt.Errorf("remove %s (%x): %w", m.Name, mid, err)
		}
	}
	removed := time.Since(start)
	if err := m.Wipe(); err != nil {
		return nil, err
	}
	lead, err := n.newLeader(ctx, nil, 10*time.Second)
	if err != nil {
		return nil, err
	}
	newID, err := addMember(ctx, cli, m.PeerURL())
	if err != nil {
		return nil, fmt.Errorf("add %s back: %w", m.Name, err)
	}
	f.Note = fmt.Sprintf("%s %s (%x) removed in %v, wiped; %s; added back as %x", role, m.Name, id, removed.Round(time.Millisecond), lead, newID)
	return func() error {
		if err := m.Start(); err != nil {
			return err
		}
		caught, err := n.caughtUp(ctx, m, 30*time.Second)
		f.Note += "; restarted empty, " + caught
		return err
	}, nil
}

// removeMember removes member id, retrying for up to 15 s until a member
// list no longer shows it: a removal can be applied and its reply lost
// (the leader changed), and a list that fails says nothing (the campaign
// once took a failed list for "removed", wiped a member still in the
// cluster, and could not add it back: "Peer URLs already exists").
func removeMember(ctx context.Context, cli clientv3.Cluster, id uint64) error {
	return retryUntil(ctx, 15*time.Second, func(rctx context.Context) error {
		resp, err := cli.MemberList(rctx)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(resp.Members, func(mm *etcdserverpb.Member) bool { return mm.ID == id }) {
			return nil
		}
		_, err = cli.MemberRemove(rctx, id)
		return err
	})
}

// addMember adds a member with peerURL and returns its ID, retrying for
// up to 15 s: an add whose reply was lost shows in the member list (the
// URL listed, the member not started: no name), and is taken as done.
func addMember(ctx context.Context, cli clientv3.Cluster, peerURL string) (uint64, error) {
	var id uint64
	err := retryUntil(ctx, 15*time.Second, func(rctx context.Context) error {
		resp, err := cli.MemberList(rctx)
		if err != nil {
			return err
		}
		for _, mm := range resp.Members {
			if slices.Contains(mm.PeerURLs, peerURL) {
				if mm.Name != "" {
					return fmt.Errorf("%s is still a started member (%x)", peerURL, mm.ID)
				}
				id = mm.ID
				return nil
			}
		}
		added, err := cli.MemberAdd(rctx, []string{peerURL})
		if err == nil {
			id = added.Member.ID
		}
		return err
	})
	return id, err
}

// retryUntil calls op (each call bounded by 5 s) until it succeeds or
// limit has passed, 200 ms apart; it returns op's last error.
func retryUntil(ctx context.Context, limit time.Duration, op func(context.Context) error) error {
	end := time.Now().Add(limit)
	for {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := op(octx)
		cancel()
		if err == nil || time.Now().After(end) || ctx.Err() != nil {
			return err
		}
		env.Sleep(ctx, 200*time.Millisecond) // etcd has no event for "ready to reconfigure": retry
	}
}
