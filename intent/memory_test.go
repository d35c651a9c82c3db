package intent_test

import (
	"testing"

	"github.com/dlock-go/dlock/intent"
	"github.com/dlock-go/dlock/intent/intenttest"
)

func TestMemory(t *testing.T) {
	t.Parallel()
	intenttest.Run(t, intenttest.Backend{New: func(*testing.T) intent.Store { return intent.NewMemory() }})
}
