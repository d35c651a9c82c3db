package fault

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// restartEmpty: a Redlock node is cut off from the workers while a
// redlock worker holds, until the holder's key there lapses (it holds
// on the other two, a bare majority); one of those two is SIGKILLed
// and restarted at once with no data, and the cut is healed: the next
// acquire finds a majority free while the holder's grant is valid. It
// lasts 1 to 2 TTLs.
type restartEmpty struct{ always }

func (restartEmpty) Name() string                      { return "restart-empty" }
func (restartEmpty) Duration(n *Nemesis) time.Duration { return n.duration(1, 2) }

// Inject: to put
// a holder on a bare majority it does not wait for a grant made while a
// node is cut off (contenders that can reach only two nodes split them
// between themselves and may grant nobody for many seconds): it cuts a
// node off from a fresh holder instead, and lets the holder's key there
// lapse while the holder extends its grant on the other two. If the
// holder releases first, the cut is healed and the next fresh holder is
// tried, for up to 24 TTLs. A try succeeds about half the time (holds are
// uniform up to 2 TTLs, and the holder must keep its grant a TTL after the
// cut): 12 TTLs, about 7 tries, failed a CI run (2026-12-06); 24 make it
// about 14.
func (restartEmpty) Inject(ctx context.Context, in *injection) (func() error, error) {
	rh, f, pick := in.rh, in.f, in.pick
	nt := rh.Net
	ttl := rh.Cfg.TTL
	cut, victim := rh.Redlock[pick%3], rh.Redlock[(pick+1)%3]
	f.Targets = []string{cut.Name, victim.Name}
	const budget = 24 // TTLs
	deadline := time.Now().Add(budget * ttl)
	for try := 1; ; try++ {
		w := in.awaitRedisWorker(ctx, "redlock", "use", grantsNow(rh.Workers()), pick+try, time.Until(deadline))
		if w == nil {
			return nil, fmt.Errorf("no redlock holder kept its grant for a TTL after %s was cut off (%d tries in %v)", cut.Name, try-1, budget*ttl)
		}
		_, g := w.Phase()
		if err := nt.Drop(cut.Host, rh.Clients); err != nil {
			return nt.Heal, err
		}
		// The key on cut was set or extended before the cut: it is gone a
		// TTL later, on cut's clock.
		if stillHolds(ctx, w, g, ttl+200*time.Millisecond) {
			f.Workers = []int{w.ID}
			victim.Kill()
			err := victim.Start(ctx, nil, rh.Shim, 0)
			f.Note = fmt.Sprintf("w%d held on %s and %s only (its key on %s lapsed while cut off); %s restarted empty, %s reconnected (try %d)",
				w.ID, victim.Name, rh.Redlock[(pick+2)%3].Name, cut.Name, victim.Name, cut.Name, try)
			return nil, errors.Join(err, nt.Heal())
		}
		if err := nt.Heal(); err != nil {
			return nil, err
		}
	}
}
