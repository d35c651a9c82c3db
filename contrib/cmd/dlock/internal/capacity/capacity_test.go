package capacity

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	assert.Equal(t, 5.0, percentile(xs, 50))
	assert.Equal(t, 10.0, percentile(xs, 99))
	assert.Equal(t, 1.0, percentile(xs, 0))
	assert.Equal(t, []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}, xs, "not modified")
	assert.True(t, math.IsNaN(percentile(nil, 50)))
}

func TestMedian(t *testing.T) {
	assert.Equal(t, 2.0, median([]float64{3, 1, 2}))
	assert.Equal(t, 2.5, median([]float64{4, 1, 2, 3}))
	assert.True(t, math.IsNaN(median(nil)))
}

func TestOutOfOrder(t *testing.T) {
	assert.Equal(t, 0, outOfOrder([]int64{3, 5, 9, 12}))
	assert.Equal(t, 1, outOfOrder([]int64{3, 9, 5, 12}))
	assert.Equal(t, 2, outOfOrder([]int64{9, 3, 5, 12}))
	assert.Equal(t, 0, outOfOrder(nil))
}

func TestSampleThins(t *testing.T) {
	s := newSample(100)
	for i := range 10000 {
		s.add(float64(i))
	}
	require.Less(t, len(s.vals), 100)
	require.Greater(t, len(s.vals), 25)
	// evenly thinned: the median of the sample is near the stream's
	assert.InDelta(t, 5000, median(s.vals), 500)
}

func TestSplit(t *testing.T) {
	assert.Equal(t, []int{4, 3, 3}, split(10, 3))
	assert.Equal(t, []int{1, 1}, split(2, 4))
	assert.Equal(t, []int{0, 4, 7}, bases([]int{4, 3, 3}))
}

const promText = `# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
process_resident_memory_bytes 1.048576e+08
etcd_mvcc_db_total_size_in_bytes 2.097152e+06
etcd_mvcc_db_total_size_in_use_in_bytes 1.6384e+06
grpc_server_handled_total{grpc_code="OK",grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 10
grpc_server_handled_total{grpc_code="OK",grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"} 5
grpc_server_handled_total{grpc_code="Canceled",grpc_method="LeaseKeepAlive",grpc_service="etcdserverpb.Lease",grpc_type="bidi_stream"} 7
grpc_server_msg_received_total{grpc_method="LeaseKeepAlive",grpc_service="etcdserverpb.Lease",grpc_type="bidi_stream"} 100
grpc_server_msg_received_total{grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"} 20
grpc_server_msg_received_total{grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 10
etcd_network_client_grpc_received_bytes_total 4096
`

func TestParseMetrics(t *testing.T) {
	ss, err := parseProm(strings.NewReader(promText))
	require.NoError(t, err)
	m := statsOf(ss)
	assert.Equal(t, memberStats{CPU: 12.5, RSS: 104857600, DBSize: 2097152, DBInUse: 1638400, Unary: 15, StreamMsgs: 120, RxBytes: 4096}, m)
	assert.Equal(t, 135.0, m.Requests())
}

func TestOptionsValidate(t *testing.T) {
	o := Options{DSN: "etcd://127.0.0.1:2379"}.withDefaults()
	require.NoError(t, o.Validate())
	o.Scenarios = []string{"z"}
	o.TTL = 1500 * 1e6
	err := o.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown scenario "z"`)
	assert.Contains(t, err.Error(), "ttl 1.5s")
}
