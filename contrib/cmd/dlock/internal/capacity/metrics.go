package capacity

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// promSample is one line of Prometheus' text format.
type promSample struct {
	name   string
	labels string // the raw label set, without braces
	value  float64
}

// parseProm parses Prometheus' text exposition format, skipping comments
// and lines it cannot read.
func parseProm(r io.Reader) ([]promSample, error) {
	var out []promSample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		var s promSample
		rest := line
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			s.name, s.labels, rest = line[:i], line[i+1:j], strings.TrimSpace(line[j+1:])
		} else {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			s.name, rest = f[0], f[1]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		s.value = v
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("capacity: read metrics: %w", err)
	}
	return out, nil
}

// sum adds the samples called name whose labels contain every one of
// with (each "key=\"value\"") and none of without.
func sum(ss []promSample, name string, with, without []string) float64 {
	var t float64
next:
	for _, s := range ss {
		if s.name != name {
			continue
		}
		for _, w := range with {
			if !strings.Contains(s.labels, w) {
				continue next
			}
		}
		for _, w := range without {
			if strings.Contains(s.labels, w) {
				continue next
			}
		}
		t += s.value
	}
	return t
}

// memberStats are the counters and gauges of one etcd member that the
// scenarios compare before and after a window.
type memberStats struct {
	CPU        float64 // process_cpu_seconds_total
	RSS        float64 // process_resident_memory_bytes
	DBSize     float64 // etcd_mvcc_db_total_size_in_bytes
	DBInUse    float64 // etcd_mvcc_db_total_size_in_use_in_bytes
	Unary      float64 // grpc_server_handled_total, unary
	StreamMsgs float64 // grpc_server_msg_received_total, streams
	RxBytes    float64 // etcd_network_client_grpc_received_bytes_total
}

// Requests is the member's request count: unary calls plus stream messages.
func (m memberStats) Requests() float64 { return m.Unary + m.StreamMsgs }

func statsOf(ss []promSample) memberStats {
	unary := []string{`grpc_type="unary"`}
	return memberStats{
		CPU:        sum(ss, "process_cpu_seconds_total", nil, nil),
		RSS:        sum(ss, "process_resident_memory_bytes", nil, nil),
		DBSize:     sum(ss, "etcd_mvcc_db_total_size_in_bytes", nil, nil),
		DBInUse:    sum(ss, "etcd_mvcc_db_total_size_in_use_in_bytes", nil, nil),
		Unary:      sum(ss, "grpc_server_handled_total", unary, nil),
		StreamMsgs: sum(ss, "grpc_server_msg_received_total", nil, unary),
		RxBytes:    sum(ss, "etcd_network_client_grpc_received_bytes_total", nil, nil),
	}
}

// scrape reads one member's /metrics on its client URL.
func scrape(ctx context.Context, hc *http.Client, clientURL string) (memberStats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(clientURL, "/")+"/metrics", nil)
	if err != nil {
		return memberStats{}, fmt.Errorf("capacity: metrics of %s: %w", clientURL, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return memberStats{}, fmt.Errorf("capacity: metrics of %s: %w", clientURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return memberStats{}, fmt.Errorf("capacity: metrics of %s: %s", clientURL, resp.Status)
	}
	ss, err := parseProm(resp.Body)
	if err != nil {
		return memberStats{}, fmt.Errorf("capacity: metrics of %s: %w", clientURL, err)
	}
	return statsOf(ss), nil
}
