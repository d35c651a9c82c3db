package cluster

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/env"
	"github.com/dlock-go/dlock/integration/cluster/fault"
)

// campaign is the soak campaign's configurations (docs/faults.md,
// "Campaign"): 3 and 5 members, TTL 2 s and 10 s, 4 and 16 workers per
// workload, every guard as the resource once, the Redis backends once.
var campaign = []struct {
	name string
	cfg  env.Config
}{
	{"c1-m3-ttl2-w4-register", env.Config{Members: 3, TTL: 2 * time.Second, PerWorkload: 4}},
	{"c2-m5-ttl2-w16-pg", env.Config{Members: 5, TTL: 2 * time.Second, PerWorkload: 16, Guard: "pg"}},
	{"c3-m3-ttl10-w16-redis", env.Config{Members: 3, TTL: 10 * time.Second, PerWorkload: 16, Guard: "redis"}},
	{"c4-m5-ttl10-w4-http", env.Config{Members: 5, TTL: 10 * time.Second, PerWorkload: 4, Guard: "http"}},
	{"c5-m3-ttl2-w16-grpc", env.Config{Members: 3, TTL: 2 * time.Second, PerWorkload: 16, Guard: "grpc"}},
	{"c6-m5-ttl10-w16-s3", env.Config{Members: 5, TTL: 10 * time.Second, PerWorkload: 16, Guard: "s3"}},
	{"c7-m5-ttl2-w4-pg", env.Config{Members: 5, TTL: 2 * time.Second, PerWorkload: 4, Guard: "pg"}},
	{"c8-redis-ttl2-w4", env.Config{TTL: 2 * time.Second, PerWorkload: 4, Workloads: env.RedisWorkloads}},
	{"c9-redis-replicas-ttl10-w4", env.Config{TTL: 10 * time.Second, PerWorkload: 4, Workloads: env.RedisWorkloads, RedisReplicas: 1}},
}

// TestCampaign runs the campaign's configurations, each for DLOCK_CAMPAIGN
// (a duration: 30m), one after another, with seed DLOCK_SEED (default
// 20261207) plus the configuration's number; DLOCK_CAMPAIGN_ONLY=c2,c5
// runs some. Each is a subtest with the checkers' verdict; `go run
// ./cmd/table -campaign DIR...` makes the table of their artifacts.
func TestCampaign(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("DLOCK_CAMPAIGN"))
	if err != nil || d <= 0 {
		t.Skip("set DLOCK_CAMPAIGN to a duration (30m) to run the campaign")
	}
	env.Need(t)
	var only []string
	if s := os.Getenv("DLOCK_CAMPAIGN_ONLY"); s != "" {
		only = strings.Split(s, ",")
	}
	base := seed(t, 20261207)
	for i, c := range campaign {
		id, _, _ := strings.Cut(c.name, "-")
		if only != nil && !slices.Contains(only, id) {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), d+20*time.Minute)
			defer cancel()
			cfg := c.cfg
			cfg.Seed = base + int64(i+1)
			cfg.Duration = d
			if cfg.Redis() {
				env.NeedRedis(t)
				verdict(t, runRedisCluster(t, ctx, cfg))
				return
			}
			cfg.Lossy = true
			if cfg.Guard != "" {
				needGuard(t, cfg.Guard)
				cfg.Classes = append(slices.Clone(fault.EtcdClasses), fault.ClassesFor(cfg.Guard)...)
			}
			verdict(t, runCluster(t, ctx, cfg))
		})
	}
}
