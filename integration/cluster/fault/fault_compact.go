package fault

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// compact compacts the store at its current revision, under load. It
// heals at once.
type compact struct{ always }

func (compact) Name() string                    { return "compact" }
func (compact) Duration(*Nemesis) time.Duration { return 0 }

func (compact) Inject(ctx context.Context, in *injection) (func() error, error) {
	cli, err := in.h.Etcd.Client()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := cli.Get(cctx, "nemesis/compact")
	if err != nil {
		return nil, err
	}
	in.f.Note = fmt.Sprintf("at revision %d", resp.Header.Revision)
	_, err = cli.Compact(cctx, resp.Header.Revision, clientv3.WithCompactPhysical())
	return nil, err
}
