package redisfence_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/contrib/redisfence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/fencetest"
	"github.com/dlock-go/dlock/integration/redistest"
)

// The fence.Guard conformance suite, on one server: each New gets a key
// prefix of its own.
func TestConformance(t *testing.T) {
	client := redistest.Start(t).Client(t)
	var prefixes atomic.Int64
	fencetest.Run(t, fencetest.Config{
		New: func(t *testing.T) fence.Guard {
			g, err := redisfence.New(client, redisfence.WithPrefix(fmt.Sprintf("fencetest:%d:", prefixes.Add(1))))
			require.NoError(t, err)
			return g
		},
		Highest: func(t *testing.T, g fence.Guard, name string) uint64 {
			h, err := g.(*redisfence.Guard).Highest(t.Context(), name)
			require.NoError(t, err)
			return h
		},
	})
}
