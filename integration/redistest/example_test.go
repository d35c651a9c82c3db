package redistest_test

import (
	"testing"

	"github.com/dlock-go/dlock/integration/redistest"
)

// ExampleStart shows the use from a test; it has no output because it
// needs a *testing.T.
func ExampleStart() {
	_ = func(t *testing.T) {
		s := redistest.Start(t) // killed when t ends
		c := s.Client(t)        // closed when t ends
		if err := c.Ping(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		s.Kill()    // a crash
		s.Restart() // back, empty, same port
	}
}

// ExampleStartN starts five independent masters for Redlock.
func ExampleStartN() {
	_ = func(t *testing.T) {
		servers := redistest.StartN(t, 5)
		clients := redistest.Clients(t, servers)
		_ = clients // redis.NewRedlock(clients, "name")
	}
}

// ExampleWithContainer runs the server in a container of redistest.Image
// even where redis-server is on PATH, for faults the container runtime
// injects (docker pause).
func ExampleWithContainer() {
	_ = func(t *testing.T) {
		s := redistest.Start(t, redistest.WithContainer()) // removed when t ends
		_ = s.ContainerID()                                // docker pause <id>
		s.Stop()                                           // docker stop
		s.Restart()                                        // docker start, same address
	}
}
