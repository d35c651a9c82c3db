package capacity

import (
	"math"
	"slices"
)

// percentile returns the p-th percentile (0 ≤ p ≤ 100) of xs by the
// nearest-rank method, or NaN for no values. xs is not modified.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// median returns the median of xs (the mean of the middle two for an even
// count), or NaN for no values.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// outOfOrder counts the grants, listed in the order they were granted,
// whose enqueue order (revs: their keys' create revisions) is lower than
// that of a grant before them: 0 for a FIFO queue.
func outOfOrder(revs []int64) int {
	n := 0
	var highest int64
	for i, r := range revs {
		if i > 0 && r < highest {
			n++
		}
		highest = max(highest, r)
	}
	return n
}

// sample keeps at most max values of a stream, evenly thinned: a
// bounded record of latencies whose percentiles stay representative.
type sample struct {
	max   int
	every int
	seen  int
	vals  []float64
}

func newSample(max int) *sample { return &sample{max: max, every: 1} }

func (s *sample) add(v float64) {
	s.seen++
	if s.seen%s.every != 0 {
		return
	}
	s.vals = append(s.vals, v)
	if len(s.vals) >= s.max {
		// keep every other value, and from now on every 2×every-th
		kept := s.vals[:0]
		for i := 0; i < len(s.vals); i += 2 {
			kept = append(kept, s.vals[i])
		}
		s.vals = kept
		s.every *= 2
	}
}
