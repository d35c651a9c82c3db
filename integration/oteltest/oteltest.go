// Package oteltest reads what an OpenTelemetry SDK ManualReader collected
// from dlock's meter, for tests.
package oteltest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dlock-go/dlock/internal/obs"
)

// Point returns the value (a histogram's count) of the data point of
// dlock's instrument name whose attributes are exactly attrs, and whether
// there is one.
func Point(t testing.TB, r *sdkmetric.ManualReader, name string, attrs ...attribute.KeyValue) (float64, bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	want := attribute.NewSet(attrs...)
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != obs.Scope {
			continue
		}
		for _, mt := range sm.Metrics {
			if mt.Name != name {
				continue
			}
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return float64(p.Value), true
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return float64(p.Count), true
					}
				}
			}
		}
	}
	return 0, false
}
