package pgtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/dlock-go/dlock/internal/testenv"
)

// Start starts a server for t alone and stops it with t.Cleanup. When the
// binaries are missing it skips t, or fails it under DLOCK_REQUIRE (see
// internal/testenv); any other startup failure fails t.
func Start(t testing.TB) *Server {
	t.Helper()
	return testenv.StartFor(t, "postgres", ErrNotInstalled, StartServer)
}

// StartDurable is Start with StartDurableServer: fsync on.
func StartDurable(t testing.TB) *Server {
	t.Helper()
	return testenv.StartFor(t, "postgres", ErrNotInstalled, StartDurableServer)
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Shared wraps m so that its Run stops the server shared by NewDatabase (if
// one was started) after the tests. Use it in TestMain:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Shared(m)) }
func Shared(m interface{ Run() int }) interface{ Run() int } {
	return sharedM{m}
}

type sharedM struct{ m interface{ Run() int } }

func (s sharedM) Run() int {
	code := s.m.Run()
	if shared.srv != nil {
		if err := shared.srv.Stop(); err != nil && code == 0 {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	return code
}

// NewDatabase returns the DSN of a fresh, empty database for t on the server
// shared by the test binary, starting that server on first use. Missing
// binaries skip t (or fail it under DLOCK_REQUIRE). The package's TestMain
// must use Shared.
func NewDatabase(t testing.TB) string {
	t.Helper()
	shared.once.Do(func() {
		// Not t.Context(): the server outlives t.
		shared.srv, shared.err = StartServer(context.Background())
	})
	if shared.err != nil {
		testenv.StartFailed(t, "postgres", ErrNotInstalled, shared.err)
	}
	return shared.srv.NewDatabase(t)
}

// NewDatabase returns the DSN of a fresh, empty database on s. It fails t
// if the database cannot be created.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name, err := s.CreateDatabase(t.Context())
	if err != nil {
		t.Fatalf("%v", err)
	}
	return s.DSN(name)
}
