package fault

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
)

// redisClockFactor is the fast clock's rate for clock-fast-node. A grant
// extends itself every TTL/3 (dlock.Open's Redis lockers auto-extend), so
// a key lives TTL/f real time on a node whose clock runs f times fast: it
// lapses between extensions only when f > 3.
const redisClockFactor = 4

// clockFastNode: two of the three Redlock nodes (a majority) are
// restarted on a clock that runs redisClockFactor times fast, each kept
// down for a TTL first (the delayed restart Redlock's authors advise, so
// that the restart itself grants nothing twice). Heal: the same, back to
// the real clock. It lasts 2 to 4 TTLs.
type clockFastNode struct{ always }

func (clockFastNode) Name() string                      { return "clock-fast-node" }
func (clockFastNode) Duration(n *Nemesis) time.Duration { return n.duration(2, 4) }

func (clockFastNode) Inject(ctx context.Context, in *injection) (func() error, error) {
	rh := in.rh
	ttl := rh.Cfg.TTL
	var nodes []*env.RedisNode
	for i := range 2 {
		nodes = append(nodes, rh.Redlock[(in.pick+i)%3])
	}
	for _, node := range nodes {
		in.f.Targets = append(in.f.Targets, node.Name)
	}
	in.f.Note = fmt.Sprintf("at %v× (down %v before each restart)", float64(redisClockFactor), ttl)
	restart := func(factor float64) error {
		for _, node := range nodes {
			node.Kill()
			env.Sleep(ctx, ttl)
			if err := node.Start(ctx, nil, rh.Shim, factor); err != nil {
				return err
			}
		}
		return nil
	}
	return func() error { return restart(0) }, restart(redisClockFactor)
}
