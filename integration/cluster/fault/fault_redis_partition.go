package fault

import (
	"context"
	"time"
)

// partitionRedis: the Sentinel master, or a Redlock node, cut off from
// the workers (alternately: the master on even turns). It lasts 1 to 3
// TTLs.
type partitionRedis struct{ always }

func (partitionRedis) Name() string                      { return "partition-redis" }
func (partitionRedis) Duration(n *Nemesis) time.Duration { return n.duration(1, 3) }

func (partitionRedis) Inject(ctx context.Context, in *injection) (func() error, error) {
	rh := in.rh
	target := rh.Redlock[in.pick%3]
	if in.turn%2 == 0 {
		m, err := rh.Master(ctx)
		if err != nil {
			return nil, err
		}
		target = m
	}
	in.f.Targets = []string{target.Name}
	in.f.Note = "cut off from the workers"
	return rh.Net.Heal, rh.Net.Drop(target.Host, rh.Clients)
}
