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

// ExampleStartSentinel runs a Mutex-style test against a Sentinel setup,
// then fails over after cutting replication.
func ExampleStartSentinel() {
	_ = func(t *testing.T) {
		st := redistest.StartSentinel(t) // master, replica, 3 sentinels
		c := st.Client(t)                // a goredis.NewFailoverClient
		_ = c                            // redis.New(c, "name")
		st.Link.Blackhole()              // writes no longer reach the replica
		st.Failover(t)                   // the replica is the master now
	}
}

// ExampleStartCluster starts a 3-master Redis Cluster.
func ExampleStartCluster() {
	_ = func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		_ = cl.Client(t) // a goredis.NewClusterClient seeded with cl.Addrs()
	}
}

// ExampleServer_Pause stalls a node without killing it.
func ExampleServer_Pause() {
	_ = func(t *testing.T) {
		s := redistest.Start(t)
		c := s.DefaultClient(t) // go-redis' defaults: ctx deadlines ignored on reads
		_ = c
		s.Pause()  // SIGSTOP: connections stay open, nothing answers
		s.Resume() // SIGCONT
	}
}
