package pgfence_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/fence"
)

const (
	workers = 50
	rounds  = 8
)

// deal hands every worker one token of each round: round r's tokens
// r*workers+1 .. (r+1)*workers, shuffled (fixed seed). Workers run at their
// own pace, so tokens of neighbouring rounds interleave at the guard.
func deal() [][]uint64 {
	rng := rand.New(rand.NewPCG(1, 2))
	hands := make([][]uint64, workers)
	for r := range rounds {
		for i, w := range rng.Perm(workers) {
			hands[w] = append(hands[w], uint64(r*workers+i+1))
		}
	}
	return hands
}

func atomicMax(v *atomic.Uint64, x uint64) {
	for {
		cur := v.Load()
		if x <= cur || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

// 50 goroutines admit interleaved tokens at once. A monitor reads the stored
// mark throughout: it never decreases. No token is admitted once a higher
// one has been admitted (checked against every admission that completed
// before the call began), and every rejection names a higher mark.
func TestConcurrentAdmitNeverGoesBack(t *testing.T) {
	ctx := testCtx(t)
	g, _ := newGuard(t, workers+2)
	const name = "hot"
	require.NoError(t, g.Admit(ctx, fence.Token{Name: name, Seq: 1}))

	var (
		maxAdmitted      atomic.Uint64
		admitted, stale  atomic.Int64
		wg               sync.WaitGroup
		start            = make(chan struct{})
		errs             = make(chan error, workers*rounds+1)
		stopMon, monDone = make(chan struct{}), make(chan struct{})
		monReads         int
	)
	go func() { // monitor
		defer close(monDone)
		var last uint64
		for {
			h, err := g.Highest(ctx, name)
			if err != nil {
				errs <- err
				return
			}
			monReads++
			if h < last {
				errs <- errors.New("stored mark decreased")
				t.Errorf("stored mark went from %d down to %d", last, h)
			}
			last = h
			select {
			case <-stopMon:
				return
			default:
			}
		}
	}()
	for _, hand := range deal() {
		wg.Go(func() {
			<-start
			for _, seq := range hand {
				before := maxAdmitted.Load()
				err := g.Admit(ctx, fence.Token{Name: name, Seq: seq})
				var se *fence.StaleTokenError
				switch {
				case err == nil:
					admitted.Add(1)
					if seq < before {
						t.Errorf("seq %d admitted after seq %d had been admitted", seq, before)
					}
					atomicMax(&maxAdmitted, seq)
				case errors.As(err, &se):
					stale.Add(1)
					if se.Seq != seq || se.Highest <= seq || se.Highest > workers*rounds {
						t.Errorf("bad rejection of seq %d: %+v", seq, se)
					}
				default:
					errs <- err
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(stopMon)
	<-monDone
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	h, err := g.Highest(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, uint64(workers*rounds), h, "the highest token always wins")
	assert.Equal(t, uint64(workers*rounds), maxAdmitted.Load())
	assert.Positive(t, admitted.Load())
	assert.Positive(t, stale.Load(), "interleaving produced stale tokens")
	assert.Equal(t, int64(workers*rounds), admitted.Load()+stale.Load())
	assert.Positive(t, monReads)
	t.Logf("admitted %d, stale %d, monitor reads %d", admitted.Load(), stale.Load(), monReads)
}

// The same load through Do: every admitted transaction appends its seq to a
// log while holding the fence row, so the log's commit order is the
// admission order, and it must never go down.
func TestConcurrentDoWritesInTokenOrder(t *testing.T) {
	ctx := testCtx(t)
	g, pool := newGuard(t, workers+2)
	exec(t, pool, `CREATE TABLE writes (id bigserial PRIMARY KEY, seq bigint NOT NULL)`)
	const name = "ledger"

	var (
		wg              sync.WaitGroup
		start           = make(chan struct{})
		admitted, stale atomic.Int64
	)
	for _, hand := range deal() {
		wg.Go(func() {
			<-start
			for _, seq := range hand {
				err := g.Do(ctx, fence.Token{Name: name, Seq: seq}, func(tx pgx.Tx) error {
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
				switch {
				case err == nil:
					admitted.Add(1)
				case errors.Is(err, fence.ErrStaleToken):
					stale.Add(1)
				default:
					t.Errorf("Do(%d): %v", seq, err)
				}
			}
		})
	}
	close(start)
	wg.Wait()

	rows, err := pool.Query(ctx, `SELECT seq FROM writes ORDER BY id`)
	require.NoError(t, err)
	log, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, log, int(admitted.Load()))
	for i := 1; i < len(log); i++ {
		assert.LessOrEqual(t, log[i-1], log[i], "write %d (seq %d) committed after seq %d", i, log[i], log[i-1])
	}
	assert.Equal(t, int64(workers*rounds), log[len(log)-1])
	assert.Positive(t, stale.Load())
	t.Logf("admitted %d, stale %d", admitted.Load(), stale.Load())
}
