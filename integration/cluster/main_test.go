package cluster

import (
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/dlock-go/dlock/integration/cluster/env"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// An interrupted run (^C, go test's timeout sends SIGQUIT and is not
	// caught) must not leave namespaces or mounts: close every harness.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-sig:
			env.CloseAll()
			env.RemoveBuilds()
			os.Exit(2)
		case <-stop:
		}
	}()
	code := m.Run()
	signal.Stop(sig)
	close(stop)
	<-done
	env.RemoveBuilds()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
