//go:build dlock_faults

package fault_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/internal/fault"
	"github.com/dlock-go/dlock/internal/fault/faulttest"
)

// At rate r the seam's clock advances r times as fast as the real one,
// and Until gives the real wait until it reads a time, so that a timer set
// with it fires when the seam's clock gets there.
func TestClockRate(t *testing.T) {
	for _, tc := range []struct {
		env string
		r   float64
	}{{"0.5", 0.5}, {"2", 2}} {
		t.Run("rate "+tc.env, func(t *testing.T) {
			r := tc.r
			faulttest.Set(t, tc.env, "")
			realStart, seamStart := time.Now(), fault.Now()
			const seamWait = 200 * time.Millisecond
			target := seamStart.Add(seamWait)
			wait := fault.Until(target)
			assert.InDelta(t, float64(seamWait)/r, float64(wait), float64(20*time.Millisecond), "Until is in real time")
			timer := time.NewTimer(wait)
			defer timer.Stop()
			<-timer.C
			realElapsed, seamElapsed := time.Since(realStart), fault.Since(seamStart)
			assert.False(t, fault.Now().Before(target), "the timer fired before the seam's clock reached its time")
			assert.InDelta(t, r, float64(seamElapsed)/float64(realElapsed), 0.05, "seam %v, real %v", seamElapsed, realElapsed)
			assert.WithinDuration(t, time.Now(), fault.Real(fault.Now()), 10*time.Millisecond, "Real inverts Now")
			assert.WithinDuration(t, realStart.Add(time.Duration(float64(seamWait)/r)), fault.Real(target), time.Millisecond)
		})
	}
}

// Rate 1 (or none) is the real clock itself.
func TestRateOneIsRealTime(t *testing.T) {
	faulttest.Set(t, "", "")
	now := time.Now()
	assert.Equal(t, now, fault.Real(now))
	assert.WithinDuration(t, time.Now(), fault.Now(), 10*time.Millisecond)
}

func TestPlanted(t *testing.T) {
	assert.True(t, fault.Enabled)
	faulttest.Set(t, "", " late-done,skip-check ,")
	assert.True(t, fault.Planted(fault.LateDone))
	assert.True(t, fault.Planted(fault.SkipCheck))
	assert.False(t, fault.Planted(fault.UnguardedRelease))
}

// A malformed environment is refused, naming the variable, and changes
// nothing.
func TestBadEnvironment(t *testing.T) {
	faulttest.Set(t, "0.5", fault.UnguardedRelease)
	for _, tc := range []struct{ rate, plants, want string }{
		{"0", "", fault.RateEnv},
		{"-1", "", fault.RateEnv},
		{"fast", "", fault.RateEnv},
		{"+Inf", "", fault.RateEnv},
		{"NaN", "", fault.RateEnv},
		{"1", "late-dne", `unknown plant "late-dne"`},
	} {
		t.Setenv(fault.RateEnv, tc.rate)
		t.Setenv(fault.PlantEnv, tc.plants)
		assert.ErrorContains(t, fault.Reload(), tc.want, "%s=%q %s=%q", fault.RateEnv, tc.rate, fault.PlantEnv, tc.plants)
		assert.True(t, fault.Planted(fault.UnguardedRelease), "unchanged")
		assert.InDelta(t, 2*float64(time.Second), float64(fault.Until(fault.Now().Add(time.Second))), float64(10*time.Millisecond), "rate unchanged")
	}
}

// The hook gets the deadline as a real wall-clock time, without monotonic
// reading; OnSessionEnd(nil) removes it.
func TestHook(t *testing.T) {
	faulttest.Set(t, "0.5", "")
	type call struct {
		lease    int64
		deadline time.Time
		err      error
	}
	var got []call
	fault.OnSessionEnd(func(lease int64, deadline time.Time, err error) { got = append(got, call{lease, deadline, err}) })
	defer fault.OnSessionEnd(nil)
	deadline := fault.Now().Add(time.Second) // in one second of the seam's clock: two real seconds
	boom := errors.New("boom")
	fault.SessionEnded(7, deadline, boom)
	require.Len(t, got, 1)
	assert.Equal(t, int64(7), got[0].lease)
	assert.Same(t, boom, got[0].err)
	assert.Equal(t, got[0].deadline.Round(0), got[0].deadline, "no monotonic reading")
	assert.WithinDuration(t, time.Now().Add(2*time.Second), got[0].deadline, 20*time.Millisecond)

	fault.OnSessionEnd(nil)
	fault.SessionEnded(8, deadline, boom)
	assert.Len(t, got, 1, "removed")
}
