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
