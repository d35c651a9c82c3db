package fault

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
)

// snapshot cuts a follower off while 300 writes pass, so that it catches
// up from a snapshot when healed; the heal waits up to a minute for it
// to catch up. It lasts 1 to 3 TTLs.
type snapshot struct{ always }

func (snapshot) Name() string                      { return "snapshot" }
func (snapshot) Duration(n *Nemesis) time.Duration { return n.duration(1, 3) }

func (snapshot) Inject(ctx context.Context, in *injection) (func() error, error) {
	nt := in.h.Net
	m := in.follower(in.leader(ctx))
	in.f.Targets = []string{m.Name}
	before := snapshotsReceived(m)
	if err := in.cut(m); err != nil {
		return nt.Heal, err
	}
	if err := in.churn(ctx, 300, m); err != nil {
		return nt.Heal, err
	}
	return func() error {
		if err := nt.Heal(); err != nil {
			return err
		}
		// A minute: in a 5-member campaign run on a loaded machine the
		// leader sent the snapshot 27 s after the heal.
		caught, err := in.caughtUp(ctx, m, time.Minute)
		in.f.Note = fmt.Sprintf("%s; snapshots received %v → %v", caught, before, snapshotsReceived(m))
		return err
	}, nil
}

// churn makes count writes under nemesis/ (each key deleted again),
// through the members other than cut, so that cut falls further behind than the leader's
// log keeps (--snapshot-count=200, 50 entries kept for catch-up).
func (n *Nemesis) churn(ctx context.Context, count int, cut *env.Member) error {
	cli, err := n.h.Etcd.Client(cut)
	if err != nil {
		return err
	}
	defer cli.Close()
	for i := range count {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		key := fmt.Sprintf("nemesis/churn/%d", i/2%10) // put, then delete
		var err error
		if i%2 == 0 {
			_, err = cli.Put(cctx, key, "x")
		} else {
			_, err = cli.Delete(cctx, key)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("churn %d: %w", i, err)
		}
	}
	return nil
}
