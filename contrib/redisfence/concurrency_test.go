package redisfence_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/fencetest"
)

// The suite's concurrent load (fencetest.Interleave) through Set and Admit
// at once: odd tokens are admitted, even ones written with Set, so Admit
// raises the mark that concurrent Sets check. An admitted Set lands only
// while its token is current, so the data key ends with the highest token
// (even, so written by Set). (The suite itself runs the load through Admit.)
func TestConcurrentSetLandsInTokenOrder(t *testing.T) {
	ctx := testCtx(t)
	g, client := newGuard(t)
	const name, dataKey = "hot", "hot:data"
	require.Zero(t, fencetest.Top%2, "the highest token must go through Set")

	admitted, stale := fencetest.Interleave(t, func(seq uint64) error {
		tok := fence.Token{Name: name, Seq: seq}
		if seq%2 == 1 {
			return g.Admit(ctx, tok)
		}
		return g.Set(ctx, tok, dataKey, strconv.FormatUint(seq, 10), 0)
	})

	assert.Equal(t, uint64(fencetest.Top), mustHighest(t, g, name))
	got, err := client.Get(ctx, dataKey).Result()
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(fencetest.Top), got, "a lower Set landed after the highest one")
	assert.Positive(t, stale)
	t.Logf("admitted %d, stale %d", admitted, stale)
}
