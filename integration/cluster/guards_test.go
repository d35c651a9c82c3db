package cluster

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/contrib/pgfence"
	"github.com/dlock-go/dlock/contrib/s3fence"
	"github.com/dlock-go/dlock/contrib/s3fence/s3test"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/cluster/env"
	"github.com/dlock-go/dlock/integration/cluster/fault"
	"github.com/dlock-go/dlock/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// needGuard ends the test unless guard's server can run here.
func needGuard(t *testing.T, guard string) {
	t.Helper()
	env.Need(t)
	switch guard {
	case "pg":
		if _, err := env.PgBin(); err != nil {
			testenv.Missing(t, "postgres", err.Error())
		}
	case "redis":
		if _, err := exec.LookPath("redis-server"); err != nil {
			testenv.Missing(t, "redis", "redis-server not found (apt-get install redis-server)")
		}
	case "s3":
		if _, err := s3test.Binary(t.Context()); err != nil {
			testenv.Missing(t, "versitygw", err.Error()+" (go run ./contrib/s3fence/s3test/install)")
		}
	}
}

// TestGuards runs each guard in Guards as the resource: the fenced
// register on a real server, written through the guard, under a holder
// paused inside its section (pause-use) and each resource-side fault.
// Every checker must pass, the guard must admit no stale write, and the
// control beside it on the same server (no guard) must lose updates: the
// pauses' double grants reached the resource.
func TestGuards(t *testing.T) {
	testenv.SkipUnlessLong(t, "~5 min: each guard's server under pauses and resource faults")
	t.Parallel()
	for _, guard := range env.Guards {
		t.Run(guard, func(t *testing.T) {
			needGuard(t, guard)
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
			defer cancel()
			classes := append([]string{"pause-use"}, fault.ClassesFor(guard)...)
			rep := runCluster(t, ctx, env.Config{
				Seed: seed(t, 20261207), Guard: guard, Workloads: []string{"mutex"}, PerWorkload: 3,
				Classes: classes, Faults: len(classes),
			})
			verdict(t, rep)
			for _, r := range rep.Rows {
				if r.Stale != 0 {
					t.Errorf("%s: %d stale writes admitted through %s", r.Workload, r.Stale, guard)
				}
				if r.Grants == 0 {
					t.Errorf("%s: no grant at all", r.Workload)
				}
			}
			lost := 0
			for _, c := range rep.Controls {
				lost += c.Lost
			}
			if len(rep.Controls) == 0 || lost == 0 {
				t.Errorf("the control on %s lost no update: the run is too gentle to count (%+v)", guard, rep.Controls)
			}
		})
	}
}

// TestPGFenceSurvivesKill: pgfence's high-water mark is durable. A token
// is admitted, the server (the harness's: fsync and synchronous commit
// on) is SIGKILLed with every backend, and restarted from its data
// directory (WAL recovery): the token below is refused, and the mark is
// the admitted token.
func TestPGFenceSurvivesKill(t *testing.T) {
	needGuard(t, "pg")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	h := resourceHost(t)
	pg, err := h.StartPG(ctx, h.ResHost)
	if err != nil {
		t.Fatal(err)
	}
	admit := func(seq uint64) error {
		conn, err := pgx.Connect(ctx, pg.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		g, err := pgfence.New(conn)
		if err != nil {
			t.Fatal(err)
		}
		return g.Admit(ctx, fence.Token{Name: "dlock-mutex", Seq: seq})
	}
	const n = 1000
	if err := admit(n); err != nil {
		t.Fatalf("admit %d: %v", n, err)
	}
	pg.Kill()
	if err := pg.Start(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	err = admit(n - 1)
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) || stale.Highest != n {
		t.Fatalf("admit %d after the kill: %v; want a stale token error with mark %d", n-1, err, n)
	}
	if err := admit(n); err != nil {
		t.Fatalf("admit %d again: %v", n, err)
	}
	t.Logf("after SIGKILL and WAL recovery, token %d refused: mark %d", n-1, stale.Highest)
}

// TestS3FenceSurvivesKill: s3fence's mark is the object's own metadata, on
// versitygw's disk. A token writes the register, the server is SIGKILLed
// and restarted on its directory: a lower token is refused with the
// written one as the mark, and the version written is listed for the
// audit.
func TestS3FenceSurvivesKill(t *testing.T) {
	needGuard(t, "s3")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	h := resourceHost(t)
	sg, err := h.StartS3Guard(ctx, h.ResHost)
	if err != nil {
		t.Fatal(err)
	}
	c := sg.Client()
	g, err := s3fence.New(ctx, c, env.S3Bucket)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	put := func(seq uint64) error {
		return g.Put(ctx, fence.Token{Name: "dlock-mutex", Seq: seq}, "reg/dlock-mutex", strings.NewReader(fmt.Sprintf("%d:%d", seq, seq)))
	}
	if err := put(n); err != nil {
		t.Fatalf("put %d: %v", n, err)
	}
	sg.Kill()
	if err := sg.Start(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	err = put(n - 1)
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) || stale.Highest != n {
		t.Fatalf("put %d after the kill: %v; want a stale token error with mark %d", n-1, err, n)
	}
	if err := put(n + 1); err != nil {
		t.Fatalf("put %d: %v", n+1, err)
	}
	recs, err := env.S3Versions(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Tok != n || recs[1].Tok != n+1 {
		t.Fatalf("versions: %+v; want tokens %d, %d in order", recs, n, n+1)
	}
	t.Logf("after SIGKILL and a restart, token %d refused: mark %d; versions %d, %d", n-1, stale.Highest, recs[0].Tok, recs[1].Tok)
}

// resourceHost makes a harness of only its network and the resource's
// host, for a guard's server alone; the test's cleanup closes it.
func resourceHost(t *testing.T) *env.Harness {
	t.Helper()
	cfg := env.Config{Dir: artifacts(t), Workloads: []string{"mutex"}}
	cfg.Defaults()
	h, err := env.NewHarness(cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if h.ResHost, err = h.Net.AddHost("res"); err != nil {
		t.Fatal(err)
	}
	return h
}
