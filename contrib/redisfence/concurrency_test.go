package redisfence_test

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

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

// 50 goroutines admit (half of them through Admit, half through Set)
// interleaved tokens at once, while a monitor reads the stored mark: it
// never decreases, no token is admitted after a higher one had been admitted
// (checked against every admission completed before the call began), and
// the data key ends with the highest admitted Set's value.
func TestConcurrentAdmitNeverGoesBack(t *testing.T) {
	ctx := testCtx(t)
	g, client := newGuard(t)
	const name, dataKey = "hot", "hot:data"

	var (
		maxAdmitted      atomic.Uint64
		maxSet           atomic.Uint64 // highest seq admitted by Set
		admitted, stale  atomic.Int64
		wg               sync.WaitGroup
		start            = make(chan struct{})
		stopMon, monDone = make(chan struct{}), make(chan struct{})
		monReads         int
	)
	go func() {
		defer close(monDone)
		var last uint64
		for {
			h, err := g.Highest(ctx, name)
			if err != nil {
				t.Errorf("monitor: %v", err)
				return
			}
			monReads++
			if h < last {
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
	for w, hand := range deal() {
		wg.Go(func() {
			<-start
			for _, seq := range hand {
				tok := fence.Token{Name: name, Seq: seq}
				before := maxAdmitted.Load()
				var err error
				if w%2 == 0 {
					err = g.Admit(ctx, tok)
				} else {
					err = g.Set(ctx, tok, dataKey, strconv.FormatUint(seq, 10), 0)
				}
				var se *fence.StaleTokenError
				switch {
				case err == nil:
					admitted.Add(1)
					if seq < before {
						t.Errorf("seq %d admitted after seq %d had been admitted", seq, before)
					}
					atomicMax(&maxAdmitted, seq)
					if w%2 == 1 {
						atomicMax(&maxSet, seq)
					}
				case errors.As(err, &se):
					stale.Add(1)
					if se.Seq != seq || se.Highest <= seq || se.Highest > workers*rounds {
						t.Errorf("bad rejection of seq %d: %+v", seq, se)
					}
				default:
					t.Errorf("seq %d: %v", seq, err)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(stopMon)
	<-monDone

	assert.Equal(t, uint64(workers*rounds), mustHighest(t, g, name), "the highest token always wins")
	assert.Equal(t, uint64(workers*rounds), maxAdmitted.Load())
	assert.Positive(t, admitted.Load())
	assert.Positive(t, stale.Load(), "interleaving produced stale tokens")
	assert.Equal(t, int64(workers*rounds), admitted.Load()+stale.Load())
	assert.Positive(t, monReads)

	// Admitted Sets landed in token order, so the data key holds the highest
	// admitted Set's value: no lower Set landed after it.
	got, err := client.Get(ctx, dataKey).Result()
	require.NoError(t, err)
	assert.Equal(t, strconv.FormatUint(maxSet.Load(), 10), got)
	t.Logf("admitted %d, stale %d, monitor reads %d", admitted.Load(), stale.Load(), monReads)
}
