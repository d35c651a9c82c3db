package fault

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
)

// failover: the Sentinel master's replication link is cut, a redis
// worker is granted on the master (so its grant, and the INCR of its
// token, never reach the replica), the master is SIGKILLed and the
// sentinels promote the replica. Heal: the old master restarts empty;
// the sentinels make it a replica of the new one. With RedisReplicas
// no grant can be confirmed after the cut: the master is killed 2 TTLs
// later, and the heal lasts until the old master is a linked replica.
// It lasts 1 to 2 TTLs.
type failover struct{ always }

func (failover) Name() string                      { return "failover" }
func (failover) Duration(n *Nemesis) time.Duration { return n.duration(1, 2) }

// Inject waits until
// the group can fail over, cuts master and replica apart, waits for a
// grant on the master after the cut (with replicas= set none can come:
// it waits 2 TTLs of refused attempts instead), kills the master and
// waits until the sentinels name the replica.
func (failover) Inject(ctx context.Context, in *injection) (func() error, error) {
	rh, f := in.rh, in.f
	nt := rh.Net
	ttl := rh.Cfg.TTL
	if err := rh.AwaitSettled(ctx); err != nil {
		return nil, err
	}
	m, err := rh.Master(ctx)
	if err != nil {
		return nil, err
	}
	r := rh.ReplicaOf(m)
	f.Targets = []string{m.Name, r.Name}
	if err := nt.Drop(m.Host, r.Host); err != nil {
		return nt.Heal, err
	}
	granted := "no grant confirmed after the cut (replicas): killed 2 TTLs later"
	if rh.Cfg.RedisReplicas > 0 {
		// No grant can be confirmed while the link is cut: the workers'
		// attempts write on the master, unconfirmed, and release. The
		// fault lasts 2 TTLs of those, as long as a holder's grant.
		env.Sleep(ctx, 2*ttl)
	} else {
		since := grantsNow(rh.Workers())
		w := in.awaitRedisWorker(ctx, "redis", "use", since, 0, 4*ttl)
		if w == nil {
			return nt.Heal, fmt.Errorf("no redis worker granted within %v after the replication link was cut", 4*ttl)
		}
		f.Workers = []int{w.ID}
		granted = fmt.Sprintf("w%d granted on %s after the cut", w.ID, m.Name)
	}
	m.Kill()
	killed := time.Now()
	heal := func() error {
		err := errors.Join(nt.Heal(), m.Start(ctx, nil, rh.Shim, 0))
		if err == nil && rh.Cfg.RedisReplicas > 0 {
			// Grants need a linked replica again: the fault lasts until
			// the old master has rejoined as the new one's replica.
			err = rh.AwaitSettled(ctx)
		}
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if nm, err := rh.Master(pctx); err == nil && nm == r {
			break
		}
		select {
		case <-pctx.Done():
			return heal, fmt.Errorf("the sentinels did not promote %s within 30s", r.Name)
		case <-time.After(50 * time.Millisecond):
		}
	}
	f.Note = fmt.Sprintf("%s; %s promoted %v after the kill", granted, r.Name, time.Since(killed).Round(time.Millisecond))
	return heal, nil
}
