//go:build !dlock_faults

package queue

import (
	"context"

	"github.com/dlock-go/dlock/internal/fault"
)

// removeHead is the plant fault.UnguardedRelease's release (plant.go),
// which only a build with the tag dlock_faults has: in this build
// fault.Planted is a function that returns false, which the compiler
// inlines, so leave never calls removeHead and the call is dropped.
func (q *Queue) removeHead(context.Context, ticket) (bool, error) {
	panic("queue: the plant " + fault.UnguardedRelease + " in a build without the tag dlock_faults")
}

// overgrant is the plant fault.TryOvergrant's count (plant.go); see
// removeHead.
func (q *Queue) overgrant(ticket) bool {
	panic("queue: the plant " + fault.TryOvergrant + " in a build without the tag dlock_faults")
}
