package leaktest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A goroutine that ends within the wait is no leak; one that outlives it
// is reported.
func TestSettled(t *testing.T) {
	done := make(chan struct{})
	go func() { time.Sleep(300 * time.Millisecond); close(done) }()
	assert.NoError(t, settled(3*time.Second), "a goroutine that ends in 300 ms")
	<-done
	stop := make(chan struct{})
	go func() { <-stop }()
	assert.Error(t, settled(200*time.Millisecond), "a goroutine that lives on")
	close(stop)
}
