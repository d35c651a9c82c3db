package pgfence_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock/contrib/pgfence"
	"github.com/dlock-go/dlock/integration/pgtest"
	"github.com/dlock-go/dlock/intent"
	"github.com/dlock-go/dlock/intent/intenttest"
)

// BenchmarkJournalDo measures what the journal adds to a call: a bare call
// to an HTTP server on loopback, against the same call through
// intent.Journal.Do on an IntentStore, one grant throughout, after a warm-up.
// Do commits two transactions (the intent, the outcome), each one round
// trip.
//
//   - journal=postgres: a server of the benchmark's own with PostgreSQL's
//     default durability (fsync, synchronous_commit, full_page_writes on),
//     its data directory on the temp dir's disk.
//   - journal=postgres-nofsync: the tests' shared server (pgtest), which
//     runs with fsync and synchronous_commit off: the cost without the
//     disk.
func BenchmarkJournalDo(b *testing.B) {
	call := intenttest.HTTPCall(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	h := intenttest.NewHeld("bench/intent", 1)

	b.Run("bare", func(b *testing.B) {
		for b.Loop() {
			if err := call(ctx, "k"); err != nil {
				b.Fatal(err)
			}
		}
	})
	journal := func(server func(testing.TB) string, fsync string) func(b *testing.B) {
		return func(b *testing.B) {
			pool, err := pgxpool.New(ctx, server(b))
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			var got string
			if err := pool.QueryRow(ctx, `SELECT current_setting('fsync') || ',' || current_setting('synchronous_commit')`).Scan(&got); err != nil {
				b.Fatal(err)
			}
			if got != fsync {
				b.Fatalf("fsync,synchronous_commit = %s, want %s", got, fsync)
			}
			s, err := pgfence.NewIntentStore(pool)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Migrate(ctx); err != nil {
				b.Fatal(err)
			}
			j := intent.New(s)
			op := b.Name() + "/"
			i := 0
			// Warm up: the pool's connections, their prepared statements,
			// the server's caches. b.Loop starts the timer afterwards.
			for ; i < warmup; i++ {
				if err := j.Do(ctx, h, op+strconv.Itoa(i), call); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				i++
				if err := j.Do(ctx, h, op+strconv.Itoa(i), call); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("journal=postgres", journal(durableServer, "on,on"))
	b.Run("journal=postgres-nofsync", journal(pgtest.NewDatabase, "off,off"))
}

// warmup is how many Do calls precede the timed ones.
const warmup = 200

// durableServer starts a PostgreSQL server with the default durability
// settings for tb (pgtest's shared servers run with fsync off, which would
// leave the commits' cost out), and returns the DSN of its postgres
// database.
func durableServer(tb testing.TB) string {
	tb.Helper()
	return pgtest.StartDurable(tb).DSN("postgres")
}
