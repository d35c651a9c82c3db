package fault

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
)

// network is the family of faults made in the network between the
// members: partitions, packet loss, a slow link. Each class is its
// shaping; the heal clears every rule (Net.Heal). Each lasts 1 to 3 TTLs.
type network struct {
	name  string
	shape func(ctx context.Context, in *injection) error // sets in.f's targets
}

func (c network) Available(*env.Harness) (bool, string) { return true, "" }
func (c network) Name() string                          { return c.name }
func (c network) Duration(n *Nemesis) time.Duration     { return n.duration(1, 3) }

func (c network) Inject(ctx context.Context, in *injection) (func() error, error) {
	return in.h.Net.Heal, c.shape(ctx, in)
}

// cutMinority cuts a follower off from the others.
func cutMinority(ctx context.Context, in *injection) error {
	m := in.follower(in.leader(ctx))
	in.f.Targets = []string{m.Name}
	return in.cut(m)
}

// cutLeader cuts the leader off; its clients stay pinned to it.
func cutLeader(ctx context.Context, in *injection) error {
	m := in.leader(ctx)
	in.f.Targets = []string{m.Name}
	return in.cut(m)
}

// cutHolder cuts off the member a lock holder (inside its critical
// section within a TTL) talks to; the leader if none is.
func cutHolder(ctx context.Context, in *injection) error {
	w := in.awaitPhase(ctx, "inside", in.pick, in.h.Cfg.TTL, nil)
	m := in.leader(ctx)
	if w != nil {
		m = w.Member
		in.f.Note = fmt.Sprintf("holder w%d (%s)", w.ID, w.Workload)
	}
	in.f.Targets = []string{m.Name}
	return in.cut(m)
}

// cutOneWay drops the leader's packets to the others, not theirs to it.
func cutOneWay(ctx context.Context, in *injection) error {
	m := in.leader(ctx)
	in.f.Targets = []string{m.Name}
	var errs []error
	for _, o := range in.h.Etcd.Members {
		if o != m {
			errs = append(errs, in.h.Net.DropOneWay(m.Host, o.Host))
		}
	}
	return errors.Join(errs...)
}

// cutBridge puts the members but the middle one in two halves that
// cannot talk: each half and the bridge make a quorum (m0 | m1 | m2 with
// 3; m0,m1 | m2 | m3,m4 with 5).
func cutBridge(_ context.Context, in *injection) error {
	ms := in.h.Etcd.Members
	b := len(ms) / 2
	var errs []error
	for i := range b {
		for j := b + 1; j < len(ms); j++ {
			in.f.Targets = append(in.f.Targets, ms[i].Name+"/"+ms[j].Name)
			errs = append(errs, in.h.Net.Drop(ms[i].Host, ms[j].Host))
		}
	}
	in.f.Note = "bridge " + ms[b].Name
	return errors.Join(errs...)
}

// loseLinks drops 30% of the packets between any two members.
func loseLinks(_ context.Context, in *injection) error {
	ms := in.h.Etcd.Members
	var errs []error
	for i := range ms {
		for j := i + 1; j < len(ms); j++ {
			errs = append(errs, in.h.Net.Lose(ms[i].Host, ms[j].Host, 0.3))
		}
	}
	return errors.Join(errs...)
}

// slowLeader squeezes the leader's sends to 256 kbit/s.
func slowLeader(ctx context.Context, in *injection) error {
	m := in.leader(ctx)
	in.f.Targets = []string{m.Name}
	return in.h.Net.Slow(m.Host, "256kbit")
}
