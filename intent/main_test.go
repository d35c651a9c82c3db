package intent_test

import (
	"testing"

	"github.com/dlock-go/dlock/internal/leaktest"
)

// TestMain checks for leaked goroutines (goleak, through leaktest, which
// gives etcd's and go-redis's clients time to see their Close).
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
