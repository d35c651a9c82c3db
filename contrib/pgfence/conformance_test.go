package pgfence_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/contrib/pgfence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/fencetest"
)

// The fence.Guard conformance suite, on one fresh database: each New gets a
// table of its own.
func TestConformance(t *testing.T) {
	pool := newPool(t, fencetest.Workers+2)
	var tables atomic.Int64
	fencetest.Run(t, fencetest.Config{
		New: func(t *testing.T) fence.Guard {
			g, err := pgfence.New(pool, pgfence.WithTable(fmt.Sprintf("fences_%d", tables.Add(1))))
			require.NoError(t, err)
			require.NoError(t, g.Migrate(testCtx(t)))
			return g
		},
		Highest: func(t *testing.T, g fence.Guard, name string) uint64 {
			h, err := g.(*pgfence.Guard).Highest(t.Context(), name)
			require.NoError(t, err)
			return h
		},
	})
}
