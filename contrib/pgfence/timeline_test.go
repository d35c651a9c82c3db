package pgfence_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/contrib/pgfence"
	"github.com/dlock-go/dlock/fence"
)

// The seed's timeline. A lock service (any: the tokens are minted here as
// the etcd lock would, as create revisions) grants A token N; A writes, then
// pauses past its session. The service grants B token N+1; B writes. A wakes
// up, still believing it holds the lock, and writes again with N.
const seedN = 41

var (
	tokA = fence.Token{Name: "accounts/7", Seq: seedN}
	tokB = fence.Token{Name: "accounts/7", Seq: seedN + 1}
)

func setupAccounts(t *testing.T) (*pgfence.Guard, *pgxpool.Pool) {
	t.Helper()
	g, pool := newGuard(t, 4)
	exec(t, pool, `CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance int NOT NULL)`)
	exec(t, pool, `INSERT INTO accounts VALUES (7, 'nobody', 0)`)
	return g, pool
}

func setOwner(ctx context.Context, owner string, balance int) func(pgx.Tx) error {
	return func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE accounts SET owner = $1, balance = $2 WHERE id = 7`, owner, balance)
		return err
	}
}

func account(t *testing.T, pool *pgxpool.Pool) (string, int) {
	t.Helper()
	var owner string
	var balance int
	require.NoError(t, pool.QueryRow(testCtx(t), `SELECT owner, balance FROM accounts WHERE id = 7`).Scan(&owner, &balance))
	return owner, balance
}

func TestSeedTimelineStaleWriteIsRejectedAndNothingCommits(t *testing.T) {
	ctx := testCtx(t)
	g, pool := setupAccounts(t)

	// A holds the lock with N and writes.
	require.NoError(t, g.Do(ctx, tokA, setOwner(ctx, "A", 100)))
	// A pauses past its session; B is granted N+1 and writes.
	require.NoError(t, g.Do(ctx, tokB, setOwner(ctx, "B", 200)))

	// A wakes up and writes with N in its own transaction: the protected
	// UPDATE runs first, the fence check comes second.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.WithoutCancel(ctx))
	require.NoError(t, setOwner(ctx, "A after the pause", 999)(tx))
	err = g.AdmitTx(ctx, tx, tokA)

	require.ErrorIs(t, err, fence.ErrStaleToken)
	var stale *fence.StaleTokenError
	require.ErrorAs(t, err, &stale)
	assert.Equal(t, fence.StaleTokenError{Name: tokA.Name, Seq: seedN, Highest: seedN + 1}, *stale)
	// Even a careless A that commits anyway commits nothing.
	assert.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxClosed)

	owner, balance := account(t, pool)
	assert.Equal(t, "B", owner, "B's write stands")
	assert.Equal(t, 200, balance)
	h, err := g.Highest(ctx, tokA.Name)
	require.NoError(t, err)
	assert.Equal(t, uint64(seedN+1), h)

	// And through Do: A's function never runs.
	err = g.Do(ctx, tokA, setOwner(ctx, "A again", 1))
	assert.ErrorIs(t, err, fence.ErrStaleToken)
	owner, _ = account(t, pool)
	assert.Equal(t, "B", owner)
}

// The control: the same timeline without the fence check loses B's write.
// It shows the test above can fail.
func TestSeedTimelineUnfencedControlOverwritesB(t *testing.T) {
	ctx := testCtx(t)
	g, pool := setupAccounts(t)
	require.NoError(t, g.Do(ctx, tokA, setOwner(ctx, "A", 100)))
	require.NoError(t, g.Do(ctx, tokB, setOwner(ctx, "B", 200)))

	// A wakes up and writes without presenting its token.
	require.NoError(t, pgx.BeginFunc(ctx, pool, setOwner(ctx, "A after the pause", 999)))

	owner, balance := account(t, pool)
	assert.Equal(t, "A after the pause", owner, "unfenced, the paused holder overwrites B")
	assert.Equal(t, 999, balance)
}

// A admits N and pauses inside its open transaction; B's AdmitTx with N+1
// waits for the fence row until A's transaction ends, so the two writers
// serialize: A (admitted first, still current) commits, then B.
func TestAdmitTxSerializesConcurrentWriters(t *testing.T) {
	ctx := testCtx(t)
	g, pool := setupAccounts(t)

	txA, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer txA.Rollback(context.WithoutCancel(ctx))
	require.NoError(t, g.AdmitTx(ctx, txA, tokA))

	bDone := make(chan error, 1)
	go func() {
		bDone <- g.Do(ctx, tokB, func(tx pgx.Tx) error {
			var owner string
			if err := tx.QueryRow(ctx, `SELECT owner FROM accounts WHERE id = 7`).Scan(&owner); err != nil {
				return err
			}
			// B runs after A committed, and sees A's write.
			_, err := tx.Exec(ctx, `UPDATE accounts SET owner = $1, balance = 200 WHERE id = 7`, "B after "+owner)
			return err
		})
	}()

	waitForLockWaiter(t, pool)
	select {
	case err := <-bDone:
		t.Fatalf("B finished while A's transaction held the fence row: %v", err)
	default:
	}

	require.NoError(t, setOwner(ctx, "A", 100)(txA))
	require.NoError(t, txA.Commit(ctx))
	require.NoError(t, <-bDone)

	owner, balance := account(t, pool)
	assert.Equal(t, "B after A", owner)
	assert.Equal(t, 200, balance)
	assert.ErrorIs(t, g.Admit(ctx, tokA), fence.ErrStaleToken, "after B, A is stale")
}

// waitForLockWaiter polls until some backend of this database waits on a
// lock (B, blocked on the fence row).
func waitForLockWaiter(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no backend started waiting for the fence row: %v", ctx.Err())
		case <-tick.C:
		}
	}
}
