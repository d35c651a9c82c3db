package cluster

// Redis runs: the library's Redis backends in the same harness as etcd's,
// under faults of their own (fault/fault_redis_*.go), judged by the same
// checkers. What fails a Redis run differs: double grants, Done after a
// successor's grant, token regressions and a fenced register that is not
// linearizable are what the run measures (the backends promise no
// better under these faults), not failures.

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock/integration/cluster/env"
	"github.com/dlock-go/dlock/integration/cluster/fault"
)

// RunRedis is Run for the Redis backends: it starts a RedisHarness,
// injects Redis faults (RedisClasses, or cfg.Classes) for cfg.Duration
// or cfg.Faults, stops the workers, checks the histories and returns the
// report. Defaults differ from Run's: the workloads are RedisWorkloads,
// the longest hold is 2 TTLs. The artifacts stay in the report's Dir;
// Recheck checks them again.
func RunRedis(ctx context.Context, cfg env.Config, logf func(string, ...any)) (*Report, error) {
	cfg.RedisDefaults()
	cfg.Defaults()
	if len(cfg.Classes) == 0 {
		cfg.Classes = fault.RedisClasses
	}
	rh, err := env.StartRedis(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer rh.Close()
	h := rh.Harness
	rng := newRNG(cfg.Seed)
	nem := fault.NewRedisNemesis(rh, rng, logf)
	rep, err := runner{
		h: h, rng: rng, logf: logf, inject: nem.Inject,
		leftovers: rh.Leftovers, store: "a node", close: rh.Close,
		check: (*Report).check,
	}.run(ctx)
	if rep != nil && cfg.RedisReplicas > 0 {
		rep.Notes = append([]string{fmt.Sprintf("redis: replicas=%d: a grant counts once that many replicas acknowledged it", cfg.RedisReplicas)}, rep.Notes...)
	}
	return rep, err
}
