package fault

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
)

// diskStall makes a member's fsyncs hang (the leader half the time) for
// 1 to 3 TTLs; the heal releases them, waits up to 10 s for a leader and
// up to a minute for the member to catch up. It needs the members' data
// on lossyfs (Config.Lossy).
type diskStall struct{}

func (diskStall) Name() string                      { return "disk-stall" }
func (diskStall) Duration(n *Nemesis) time.Duration { return n.duration(1, 3) }

func (diskStall) Available(h *env.Harness) (bool, string) {
	for _, m := range h.Etcd.Members {
		if !m.Stallable() {
			return false, "the members' disks are not lossy"
		}
	}
	return true, ""
}

func (diskStall) Inject(ctx context.Context, in *injection) (func() error, error) {
	m, l := in.leaderOrFollower(ctx)
	unstall, ok := m.Stall()
	if !ok {
		in.f.Note = "skipped: the members' disks are not lossy"
		return nil, nil
	}
	in.f.Targets = []string{m.Name}
	role := "follower"
	if m == l {
		role = "leader"
	}
	return func() error {
		during := in.leaders(ctx)
		held := unstall()
		in.f.Note = fmt.Sprintf("%s %s stalled, %d syncs held; before unstall %s", role, m.Name, held, during)
		lead, err := in.newLeader(ctx, nil, 10*time.Second)
		if err != nil {
			return err
		}
		caught, err := in.caughtUp(ctx, m, time.Minute)
		in.f.Note += fmt.Sprintf("; after: %s; %s %s", lead, m.Name, caught)
		return err
	}, nil
}
