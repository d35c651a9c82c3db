package cluster

import (
	"cmp"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// CampaignTable rechecks saved runs (artifacts directories) with the
// checkers as they are and returns one markdown row per run: its
// configuration, seed and faults, and its figures summed over workloads.
// It reports whether every run passed.
func CampaignTable(dirs []string) (string, bool, error) {
	var b strings.Builder
	b.WriteString("| run | backend | members | TTL | workers per workload | resource | seed | faults | grants | double grants (unfenced) | control's lost updates | stale admitted (fenced) | Done after successor: counted (exempt) | token regressions | recovery p50/max | verdict |\n")
	b.WriteString("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	passed := true
	for _, dir := range dirs {
		cfg, rep, e, err := load(dir)
		if err != nil {
			return "", false, fmt.Errorf("%s: %w", dir, err)
		}
		backend, members, resource := "etcd", fmt.Sprint(cfg.Members), cmp.Or(cfg.Guard, "register")
		if cfg.redis() {
			cfg.redisDefaults()
			backend, members, resource = strings.Join(cfg.Workloads, " + "), "-", "register"
		}
		cfg.defaults()
		if members == "0" {
			members = "3"
		}
		if err := rep.check(cfg, e.End, e.SlowClocks); err != nil {
			return "", false, fmt.Errorf("%s: %w", dir, err)
		}
		var sum Row
		var rec []time.Duration
		for _, r := range rep.Rows {
			sum.Grants += r.Grants
			sum.Double += r.Double
			sum.Stale += r.Stale
			sum.DoneAfter += r.DoneAfter
			sum.Exempt += r.Exempt
			sum.Regressions += r.Regressions
			rec = append(rec, r.Recovery...)
		}
		lost := "-"
		if len(rep.Controls) > 0 {
			n := 0
			for _, c := range rep.Controls {
				n += c.Lost
			}
			lost = fmt.Sprint(n)
		}
		verdict := "passed"
		if len(rep.Failures) > 0 {
			verdict = fmt.Sprintf("%d failures", len(rep.Failures))
			passed = false
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %v | %d | %s | %d | %d | %d | %d | %s | %d | %d (%d) | %d | %s / %s | %s |\n",
			filepath.Base(dir), backend, members, cfg.TTL, cfg.PerWorkload, resource, cfg.Seed, len(rep.Faults),
			sum.Grants, sum.Double, lost, sum.Stale, sum.DoneAfter, sum.Exempt, sum.Regressions,
			ms(quantile(rec, 0.5)), ms(quantile(rec, 1)), verdict)
	}
	return b.String(), passed, nil
}
