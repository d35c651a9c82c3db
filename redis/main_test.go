package redis_test

import (
	"testing"

	"github.com/dlock-go/dlock/internal/leaktest"
)

// TestMain checks with goleak that no goroutine outlives the tests, giving
// go-redis's pools, which probe refused addresses, time to see their Close.
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
