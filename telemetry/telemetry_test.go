package telemetry_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Guard counts the tokens the guard it wraps rejects, and passes every
// answer on as it is.
func TestGuardCountsRejections(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer mp.Shutdown(context.Background())
	g := telemetry.Guard(fence.NewMemoryGuard(), "memory", telemetry.Providers{MeterProvider: mp})
	ctx := t.Context()
	require.NoError(t, g.Admit(ctx, fence.Token{Name: "a", Seq: 2}))
	assert.ErrorIs(t, g.Admit(ctx, fence.Token{Name: "a", Seq: 1}), fence.ErrStaleToken)
	assert.ErrorIs(t, g.Admit(ctx, fence.Token{Name: "a"}), fence.ErrNoToken)

	assert.Equal(t, int64(1), rejected(t, rd), "one stale token, not the missing one")

	var nilFence *telemetry.Fence
	assert.NoError(t, nilFence.Write(ctx, fence.Token{Name: "a", Seq: 1}, func(context.Context) error { return nil }), "a nil Fence records nothing")
}

// FenceOf applies the options in order, skips a nil one, and records
// where the last one said.
func TestFenceOf(t *testing.T) {
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	defer mp.Shutdown(context.Background())
	type option func(*telemetry.Providers)
	set := func(p telemetry.Providers) option { return func(t *telemetry.Providers) { *t = p } }
	f := telemetry.FenceOf("http", []option{set(telemetry.Providers{}), nil, set(telemetry.Providers{MeterProvider: mp})})
	stale := func(context.Context) error { return fence.ErrStaleToken }
	assert.ErrorIs(t, f.Write(t.Context(), fence.Token{Name: "a", Seq: 1}, stale), fence.ErrStaleToken)
	assert.Equal(t, int64(1), rejected(t, rd), "the rejection went to the last option's MeterProvider")
}

// rejected returns the sum of dlock.fence.rejected in rd.
func rejected(t *testing.T, rd *sdkmetric.ManualReader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, rd.Collect(t.Context(), &rm))
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "dlock.fence.rejected" {
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					n += dp.Value
				}
			}
		}
	}
	return n
}
