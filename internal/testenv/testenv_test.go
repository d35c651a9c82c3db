package testenv

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRequired(t *testing.T) {
	for v, want := range map[string]bool{"": false, "all": true, "redis": true, "postgres,redis": true, "postgres": false, "redis-server": false} {
		t.Setenv("DLOCK_REQUIRE", v)
		assert.Equal(t, want, Required("redis"), "DLOCK_REQUIRE=%q", v)
	}
}

func TestLong(t *testing.T) {
	for v, want := range map[string]bool{"": false, "0": false, "1": true, "yes": true} {
		t.Setenv(LongVar, v)
		assert.Equal(t, want, Long(), "%s=%q", LongVar, v)
	}
	t.Setenv(LongVar, "")
	t.Run("skips", func(t *testing.T) {
		SkipUnlessLong(t, "~1 s")
		t.Error("ran without " + LongVar)
	})
	t.Setenv(LongVar, "1")
	ran := false
	t.Run("runs", func(t *testing.T) {
		SkipUnlessLong(t, "~1 s")
		ran = true
	})
	assert.True(t, ran, "a long test runs with %s=1", LongVar)
}
