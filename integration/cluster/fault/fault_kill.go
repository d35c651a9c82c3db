package fault

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
)

// kill is the family of member crashes: SIGKILL a member (the leader
// half the time) and restart it from its data when healed; with lose,
// its unsynced writes are dropped first (a power loss; needs Lossy to
// lose anything). Each lasts 0.5 to 2 TTLs.
type kill struct {
	name string
	lose bool
}

func (c kill) Available(*env.Harness) (bool, string) { return true, "" }
func (c kill) Name() string                          { return c.name }
func (c kill) Duration(n *Nemesis) time.Duration     { return n.duration(0.5, 2) }

func (c kill) Inject(ctx context.Context, in *injection) (func() error, error) {
	m := in.follower(in.leader(ctx))
	if in.pick%2 == 0 {
		m = in.leader(ctx)
	}
	in.f.Targets = []string{m.Name}
	if c.lose {
		in.f.Note = fmt.Sprintf("%d bytes unsynced lost", m.KillLose(2*time.Second))
	} else {
		m.Kill()
	}
	return m.Start, nil
}
