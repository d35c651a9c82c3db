package fault

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
	"github.com/dlock-go/dlock/integration/cluster/history"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// moveLeader transfers leadership (MoveLeader, asked of the leader at its
// own endpoint) to a follower, under load, and waits until it leads. It
// heals at once.
type moveLeader struct{ always }

func (moveLeader) Name() string                    { return "move-leader" }
func (moveLeader) Duration(*Nemesis) time.Duration { return 0 }

func (moveLeader) Inject(ctx context.Context, in *injection) (func() error, error) {
	l := in.leader(ctx)
	t := in.follower(l)
	in.f.Targets = []string{l.Name, t.Name}
	return nil, in.moveLeader(ctx, in.f, l, t)
}

// moveLeader asks leader l (at its own endpoint) to hand leadership to
// t, and waits until t leads.
func (n *Nemesis) moveLeader(ctx context.Context, f *history.Fault, l, t *env.Member) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{l.Endpoint()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := cli.Status(mctx, t.Endpoint())
	if err != nil {
		return fmt.Errorf("status of %s: %w", t.Name, err)
	}
	start := time.Now()
	if _, err := cli.MoveLeader(mctx, st.Header.MemberId); err != nil {
		return fmt.Errorf("move leader %s → %s: %w", l.Name, t.Name, err)
	}
	moved := time.Since(start)
	lead, err := n.newLeader(ctx, t, 10*time.Second)
	f.Note = fmt.Sprintf("%s → %s (term %d before): MoveLeader returned in %v; %s", l.Name, t.Name, st.RaftTerm, moved.Round(time.Millisecond), lead)
	return err
}
