package intent_test

import (
	"testing"

	"github.com/dlock-go/dlock/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
