package pgfence_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/fencetest"
)

// The suite's concurrent load (fencetest.Interleave) through Do: every
// admitted transaction appends its seq to a log while holding the fence
// row, so the log's commit order is the admission order, and it must never
// go down. (The suite itself runs the load through Admit.)
func TestConcurrentDoWritesInTokenOrder(t *testing.T) {
	ctx := testCtx(t)
	g, pool := newGuard(t, fencetest.Workers+2)
	exec(t, pool, `CREATE TABLE writes (id bigserial PRIMARY KEY, seq bigint NOT NULL)`)
	const name = "ledger"

	admitted, stale := fencetest.Interleave(t, func(seq uint64) error {
		return g.Do(ctx, fence.Token{Name: name, Seq: seq}, func(tx pgx.Tx) error {
			var last int64
			if err := tx.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM writes`).Scan(&last); err != nil {
				return err
			}
			if uint64(last) > seq {
				t.Errorf("seq %d admitted while the last committed write had seq %d", seq, last)
			}
			_, err := tx.Exec(ctx, `INSERT INTO writes (seq) VALUES ($1)`, int64(seq))
			return err
		})
	})

	rows, err := pool.Query(ctx, `SELECT seq FROM writes ORDER BY id`)
	require.NoError(t, err)
	log, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, log, admitted)
	for i := 1; i < len(log); i++ {
		assert.LessOrEqual(t, log[i-1], log[i], "write %d (seq %d) committed after seq %d", i, log[i], log[i-1])
	}
	assert.Equal(t, int64(fencetest.Top), log[len(log)-1])
	assert.Positive(t, stale)
	t.Logf("admitted %d, stale %d", admitted, stale)
}
