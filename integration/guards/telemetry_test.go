// Package guards_test checks what every fencing guard of contrib has in
// common, across their modules: the telemetry each records.
package guards_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/dlock-go/dlock/contrib/grpcfence"
	"github.com/dlock-go/dlock/contrib/httpfence"
	"github.com/dlock-go/dlock/contrib/pgfence"
	"github.com/dlock-go/dlock/contrib/redisfence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/integration/oteltest"
	"github.com/dlock-go/dlock/integration/pgtest"
	"github.com/dlock-go/dlock/integration/redistest"
	"github.com/dlock-go/dlock/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// metrics reads what a ManualReader has collected.
type metrics struct {
	t *testing.T
	r *sdkmetric.ManualReader
}

func (m metrics) assert(name string, want float64, attrs ...attribute.KeyValue) {
	m.t.Helper()
	got, ok := oteltest.Point(m.t, m.r, name, attrs...)
	if assert.True(m.t, ok, "%s%v: no data point", name, attrs) {
		assert.Equal(m.t, want, got, "%s%v", name, attrs)
	}
}

func newMetrics(t *testing.T) (metrics, *sdkmetric.MeterProvider) {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	return metrics{t: t, r: r}, mp
}

// Every guard counts the stale tokens it rejects, with its dlock.guard
// attribute and no backend.
func TestTelemetryGuards(t *testing.T) {
	m, mp := newMetrics(t)
	ctx := etcdtest.Context(t)
	stale := fence.Token{Name: "orders", Seq: 5}
	fresh := fence.Token{Name: "orders", Seq: 7}
	guard := func(g string) attribute.KeyValue { return attribute.String("dlock.guard", g) }

	// A guard without telemetry of its own (fence depends on nothing)
	// records through telemetry.Guard.
	memory := func() fence.Guard {
		return telemetry.Guard(fence.NewMemoryGuard(), "memory", telemetry.Providers{MeterProvider: mp})
	}
	mem := memory()
	require.NoError(t, mem.Admit(ctx, fresh))
	require.ErrorIs(t, mem.Admit(ctx, stale), fence.ErrStaleToken)
	m.assert("dlock.fence.rejected", 1, guard("memory"))

	pool, err := pgxpool.New(ctx, pgtest.Start(t).NewDatabase(t))
	require.NoError(t, err)
	defer pool.Close()
	pg, err := pgfence.New(pool, pgfence.WithTelemetry(telemetry.Providers{MeterProvider: mp}))
	require.NoError(t, err)
	require.NoError(t, pg.Migrate(ctx))
	require.NoError(t, pg.Admit(ctx, fresh))
	require.ErrorIs(t, pg.Admit(ctx, stale), fence.ErrStaleToken)
	m.assert("dlock.fence.rejected", 1, guard("postgres"))

	rdb := goredis.NewClient(&goredis.Options{Addr: redistest.Start(t).Addr()})
	defer rdb.Close()
	rg, err := redisfence.New(rdb, redisfence.WithTelemetry(telemetry.Providers{MeterProvider: mp}))
	require.NoError(t, err)
	require.NoError(t, rg.Admit(ctx, fresh))
	require.ErrorIs(t, rg.Admit(ctx, stale), fence.ErrStaleToken)
	m.assert("dlock.fence.rejected", 1, guard("redis"))

	srv := httptest.NewServer(httpfence.Middleware(memory(), httpfence.WithTelemetry(telemetry.Providers{MeterProvider: mp}))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	defer srv.Close()
	for _, tok := range []fence.Token{fresh, stale} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		require.NoError(t, err)
		httpfence.SetHeader(req.Header, tok)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	m.assert("dlock.fence.rejected", 1, guard("http"))

	intercept := grpcfence.UnaryServerInterceptor(memory(), grpcfence.WithTelemetry(telemetry.Providers{MeterProvider: mp}))
	for _, tok := range []fence.Token{fresh, stale} {
		ictx := metadata.NewIncomingContext(ctx, metadata.Pairs(grpcfence.MetadataKey, tok.String()))
		_, err := intercept(ictx, nil, &grpc.UnaryServerInfo{FullMethod: "/x/Y"}, func(context.Context, any) (any, error) { return nil, nil })
		if tok == stale {
			assert.Equal(t, codes.FailedPrecondition, status.Code(err))
		}
	}
	m.assert("dlock.fence.rejected", 1, guard("grpc"))
	m.assert("dlock.fence.rejected", 3, guard("memory")) // and the guards behind the middleware
}
