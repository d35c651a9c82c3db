package env

import (
	"os"
	"os/exec"
	"testing"

	"github.com/dlock-go/dlock/internal/testenv"
)

// Need ends the test unless this machine can run the harness: root (for
// namespaces, iptables and FUSE), iproute2 and iptables. A missing piece
// skips the test, or fails it under DLOCK_REQUIRE (internal/testenv).
func Need(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "netns", "the cluster harness needs root (network namespaces, iptables, FUSE)")
	}
	for _, bin := range []string{"ip", "iptables", "tc"} {
		if _, err := exec.LookPath(bin); err != nil {
			testenv.Missing(t, "netns", bin+" not found (apt-get install iproute2 iptables)")
		}
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Missing(t, "fuse", "/dev/fuse not found")
	}
}

// NeedRedis ends the test unless redis-server, redis-sentinel and gcc (for
// the fast-clock shim) are on PATH.
func NeedRedis(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-sentinel"} {
		if _, err := exec.LookPath(bin); err != nil {
			testenv.Missing(t, "redis", bin+" not found (apt-get install redis-server redis-sentinel)")
		}
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		testenv.Missing(t, "gcc", "gcc not found: the fast-clock shim is built with it (apt-get install gcc)")
	}
}
