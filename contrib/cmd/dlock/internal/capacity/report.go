package capacity

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
)

// Report is the result of Run, its JSON the fixed schema (version 1) that
// charts are drawn from.
type Report struct {
	Version int         `json:"version"`
	Started string      `json:"started"` // RFC 3339
	Cluster ClusterInfo `json:"cluster"`
	Config  ConfigInfo  `json:"config"`
	Rows    []Row       `json:"rows"`
}

// ClusterInfo describes the cluster measured.
type ClusterInfo struct {
	Endpoints   []string `json:"endpoints"`
	Members     int      `json:"members"`
	EtcdVersion string   `json:"etcd_version"`
}

// ConfigInfo is the configuration of the run, as flags give it.
type ConfigInfo struct {
	Scenarios        []string `json:"scenarios"`
	Impls            []string `json:"impls"`
	Inflight         []int    `json:"inflight"`
	Held             []int    `json:"held"`
	HeldSessions     int      `json:"held_sessions"`
	Extra            int      `json:"extra"`
	Waiters          []int    `json:"waiters"`
	HerdMax          int      `json:"herd_max"`
	Sessions         []int    `json:"sessions"`
	Expire           []int    `json:"expire"`
	FailoverSessions []int    `json:"failover_sessions"`
	Runs             int      `json:"runs"`
	Procs            int      `json:"procs"`
	Clients          int      `json:"clients"`
	TTLSeconds       float64  `json:"ttl_s"`
	WindowSeconds    float64  `json:"window_s"`
	DurationSeconds  float64  `json:"duration_s"`
	Failover         string   `json:"failover"` // "move-leader", "cmd" or "callback"
}

// Row is one scenario at one load for one implementation: the medians of
// its runs' metrics (snake_case names, units in the suffix).
type Row struct {
	Scenario string             `json:"scenario"`
	Load     int                `json:"load"`
	Variant  string             `json:"variant"`
	Impl     string             `json:"impl"`
	Runs     int                `json:"runs"`
	Metrics  map[string]float64 `json:"metrics"`
	Note     string             `json:"note,omitempty"`
}

// scenarioInfo is a scenario's title, load name and table columns.
type scenarioInfo struct {
	title, load string
	columns     []string
}

func infoOf(s string) scenarioInfo {
	switch s {
	case "a":
		return scenarioInfo{"a. throughput, distinct locks", "inflight", []string{"grants_per_s", "acquire_p50_ms", "acquire_p99_ms", "leader_cpu_s_per_min"}}
	case "b":
		return scenarioInfo{"b. held locks", "held", []string{"lock_unlock_p50_ms", "lock_unlock_p99_ms", "leader_req_per_s", "leader_rx_bytes_per_s", "all_req_per_s", "leader_cpu_s_per_min", "rss_bytes_per_lock", "db_bytes_per_lock"}}
	case "c":
		return scenarioInfo{"c. waiters on one name", "waiters", []string{"handoff_p50_ms", "handoff_p99_ms", "leader_mem_bytes_per_waiter", "out_of_order"}}
	case "d":
		return scenarioInfo{"d. sessions", "sessions", []string{"leader_cpu_s_per_min", "leader_req_per_s", "leader_rx_bytes_per_s", "all_req_per_s", "all_cpu_s_per_min"}}
	case "e":
		return scenarioInfo{"e. mass expiry (holders SIGKILLed)", "sessions", []string{"first_grant_s", "all_granted_s", "ttl_s", "revoke_bound_s"}}
	case "f":
		return scenarioInfo{"f. leader failover", "sessions", []string{"time_to_first_grant_s", "all_renewed_s", "sessions_lost", "new_leader_s"}}
	}
	return scenarioInfo{title: s, load: "load"}
}

// Columns returns the metrics a scenario's rows report (the table's
// columns).
func Columns(scenario string) []string { return infoOf(scenario).columns }

// WriteTable prints r as one table per scenario.
func WriteTable(w io.Writer, r *Report) error {
	fmt.Fprintf(w, "etcd %s, %d members, %v; medians of %d runs; TTL %gs\n", r.Cluster.EtcdVersion, r.Cluster.Members, r.Cluster.Endpoints, r.Config.Runs, r.Config.TTLSeconds)
	for _, s := range r.Config.Scenarios {
		info := infoOf(s)
		fmt.Fprintf(w, "\n%s\n", info.title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%s\tvariant\timpl\t", info.load)
		for _, c := range info.columns {
			fmt.Fprintf(tw, "%s\t", c)
		}
		fmt.Fprintln(tw, "note\t")
		for _, row := range r.Rows {
			if row.Scenario != s {
				continue
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t", row.Load, row.Variant, row.Impl)
			for _, c := range info.columns {
				v, ok := row.Metrics[c]
				fmt.Fprintf(tw, "%s\t", formatValue(v, ok))
			}
			fmt.Fprintf(tw, "%s\t\n", row.Note)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func formatValue(v float64, ok bool) string {
	switch {
	case !ok || math.IsNaN(v):
		return "n/a"
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
