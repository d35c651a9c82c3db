package fault

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
)

// pauseRedisHolder is the Redis runs' pause-use: SIGSTOP a holder (a
// redis and a redlock one alternately, by turn) inside its critical
// section (phase "inside": it looks at Done again only after its write)
// for longer than the TTL, then SIGCONT: the process pause of
// Kleppmann's figure.
type pauseRedisHolder struct{ always }

func (pauseRedisHolder) Name() string                      { return "pause-use" }
func (pauseRedisHolder) Duration(n *Nemesis) time.Duration { return n.pastTTL() }

func (pauseRedisHolder) Inject(ctx context.Context, in *injection) (func() error, error) {
	ttl := in.rh.Cfg.TTL
	wl := env.RedisWorkloads[in.turn%len(env.RedisWorkloads)]
	w := in.awaitRedisWorker(ctx, wl, "inside", nil, in.pick, 2*ttl)
	if w == nil {
		return nil, fmt.Errorf("no %s worker in its critical section within %v", wl, 2*ttl)
	}
	in.f.Targets = []string{fmt.Sprintf("w%d", w.ID)}
	in.f.Workers = []int{w.ID}
	in.f.Note = w.Workload
	if err := w.Proc.Signal(syscall.SIGSTOP); err != nil {
		return nil, err
	}
	return func() error { return w.Proc.Signal(syscall.SIGCONT) }, nil
}
