package fencetest

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dlock-go/dlock/fence"
)

// The load of Interleave and of the suite's concurrency test: Workers
// goroutines, each presenting Rounds tokens of one lock name.
const (
	Workers = 50
	Rounds  = 8

	// Top is the highest token of the load, Workers*Rounds.
	Top = Workers * Rounds
)

// Interleave calls write once for each token Seq 1 .. Top of one lock name,
// from Workers goroutines at once: round r's tokens r*Workers+1 ..
// (r+1)*Workers are dealt one to each goroutine (shuffled, fixed seed), and
// each goroutine presents its tokens in round order at its own pace, so
// tokens of neighbouring rounds interleave at the guard. It returns when
// every call has returned.
//
// write presents its token to the guard under test, typically through the
// backend's guarded write (a transaction, a script). It must return nil if
// the token was admitted, an error matching fence.ErrStaleToken if it was
// rejected, and nothing else: any other error fails t. A rejection that is a
// *fence.StaleTokenError must carry seq and a mark above seq and at most
// Top. write is called from goroutines other than t's: it must report
// failures with t.Error, never t.Fatal or require.
//
// Interleave returns how many tokens were admitted and how many rejected.
func Interleave(t *testing.T, write func(seq uint64) error) (admitted, stale int) {
	t.Helper()
	return interleave(t, write, nil)
}

// interleave is Interleave with poll called on t's goroutine until every
// worker has finished (at least once), so that poll may fail t with
// t.FailNow. A nil poll is not called.
func interleave(t *testing.T, write func(seq uint64) error, poll func()) (admitted, stale int) {
	t.Helper()
	var (
		nAdmitted, nStale atomic.Int64
		running           atomic.Int32
		wg                sync.WaitGroup
		start             = make(chan struct{})
	)
	// Also when poll ends this goroutine with t.FailNow: no worker outlives
	// the test.
	defer wg.Wait()
	hands := deal()
	running.Store(int32(len(hands)))
	for _, hand := range hands {
		wg.Go(func() {
			defer running.Add(-1)
			<-start
			for _, seq := range hand {
				err := write(seq)
				var se *fence.StaleTokenError
				switch {
				case err == nil:
					nAdmitted.Add(1)
				case errors.Is(err, fence.ErrStaleToken):
					nStale.Add(1)
					if errors.As(err, &se) && (se.Seq != seq || se.Highest <= seq || se.Highest > Top) {
						t.Errorf("token %d rejected with a wrong mark: %+v (want Seq %d, %d < Highest <= %d)", seq, *se, seq, seq, Top)
					}
				default:
					t.Errorf("token %d: %v", seq, err)
				}
			}
		})
	}
	close(start)
	if poll != nil {
		for {
			poll()
			if running.Load() == 0 {
				break
			}
		}
	}
	wg.Wait()
	return int(nAdmitted.Load()), int(nStale.Load())
}

// deal returns the tokens of each of Workers goroutines: one token of each
// round, round r's tokens r*Workers+1 .. (r+1)*Workers shuffled among them
// with a fixed seed.
func deal() [][]uint64 {
	rng := rand.New(rand.NewPCG(1, 2))
	hands := make([][]uint64, Workers)
	for r := range Rounds {
		for i, w := range rng.Perm(Workers) {
			hands[w] = append(hands[w], uint64(r*Workers+i+1))
		}
	}
	return hands
}
