//go:build !dlock_faults

package fault_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/dlock-go/dlock/internal/fault"
)

// Without the tag the seam is the real clock, no plant is planted, and the
// hook is never called.
func TestOff(t *testing.T) {
	assert.False(t, fault.Enabled)
	for _, p := range fault.Plants {
		assert.False(t, fault.Planted(p), p)
	}
	now := time.Now()
	assert.Equal(t, now, fault.Real(now))
	assert.Equal(t, now.Round(0), fault.Wall(now))
	assert.WithinDuration(t, time.Now(), fault.Now(), time.Second)
	assert.Equal(t, time.Second, fault.Validity(3*time.Second, time.Second), "the validity as given")

	fault.OnSessionEnd(func(int64, time.Time, error) { t.Error("hook called") })
	defer fault.OnSessionEnd(nil)
	fault.SessionEnded(1, now, errors.New("x"))
}
