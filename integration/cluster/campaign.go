package cluster

import (
	"cmp"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dlock-go/dlock/integration/cluster/check"
	"github.com/dlock-go/dlock/integration/cluster/env"
)

// CampaignTable rechecks saved runs (artifacts directories) with the
// checkers as they are and returns one markdown row per run (its
// configuration, seed and faults, and its figures summed over workloads),
// then one per backend and fault class over all the runs (what happened
// from each of the class's faults' start to the next fault's). It reports
// whether every run passed.
func CampaignTable(dirs []string) (string, bool, error) {
	var b strings.Builder
	b.WriteString("| run | backend | members | TTL | workers per workload | resource | seed | faults | grants | double grants (unfenced) | control's lost updates | stale admitted (fenced) | Done after successor: counted (exempt) | token regressions | recovery p50/max | verdict |\n")
	b.WriteString("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	passed := true
	type key struct{ backend, class string }
	classes := map[key]*check.Row{}
	faults := map[key]int{}
	for _, dir := range dirs {
		cfg, rep, e, err := load(dir)
		if err != nil {
			return "", false, fmt.Errorf("%s: %w", dir, err)
		}
		backend, members, resource := "etcd", fmt.Sprint(cfg.Members), cmp.Or(cfg.Guard, "register")
		if cfg.Redis() {
			cfg.RedisDefaults()
			backend, members, resource = strings.Join(cfg.Workloads, " + "), "-", "register"
		}
		cfg.Defaults()
		if members == "0" {
			members = "3"
		}
		if err := rep.check(cfg, e.End, e.SlowClocks); err != nil {
			return "", false, fmt.Errorf("%s: %w", dir, err)
		}
		var sum check.Row
		for _, r := range rep.Rows {
			sum.Add(r)
		}
		for _, r := range rep.ByClass {
			k := key{r.Workload, r.Class}
			if classes[k] == nil {
				classes[k] = &check.Row{Workload: r.Workload, Class: r.Class}
			}
			classes[k].Add(r)
		}
		for _, f := range rep.Faults {
			for _, backend := range backendsOf(cfg) {
				faults[key{backend, f.Class}]++
			}
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
			ms(quantile(sum.Recovery, 0.5)), ms(quantile(sum.Recovery, 1)), verdict)
	}
	b.WriteString("\n| backend | fault class | faults | grants | double grants (unfenced) | stale admitted (fenced) | Done after successor: counted (exempt) | token regressions | recovery p50/max |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---|\n")
	keys := slices.SortedFunc(maps.Keys(classes), func(a, b key) int {
		return cmp.Or(cmp.Compare(a.backend, b.backend), cmp.Compare(a.class, b.class))
	})
	for _, k := range keys {
		c := classes[k]
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d (%d) | %d | %s / %s |\n",
			k.backend, k.class, faults[k], c.Grants, c.Double, c.Stale, c.DoneAfter, c.Exempt, c.Regressions,
			ms(quantile(c.Recovery, 0.5)), ms(quantile(c.Recovery, 1)))
	}
	return b.String(), passed, nil
}

// backendsOf names the backends of a run's rows: "etcd", or the Redis
// workloads (each a backend of its own).
func backendsOf(cfg env.Config) []string {
	if cfg.Redis() {
		return cfg.Workloads
	}
	return []string{"etcd"}
}
