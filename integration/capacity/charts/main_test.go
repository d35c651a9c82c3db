package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/integration/capacity"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the command as the README says, on the fixture: charts into
// a directory, tables on stdout and into a copy of a page with the markers.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "BENCHMARKS.md")
	if err := os.WriteFile(page, []byte("# x\n"+capacity.BeginMarker+"\n"+capacity.EndMarker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	in := filepath.Join("..", "testdata", "small.json")
	if err := run([]string{"-in", in, "-out", filepath.Join(dir, "svg"), "-markdown", "-splice", page}, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	for _, f := range []string{"throughput.svg", "held-locks-latency.svg", "waiters-handoff.svg", "sessions-leader-cpu.svg"} {
		if _, err := os.Stat(filepath.Join(dir, "svg", f)); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(stdout.String(), "### f. Leader failover\n") {
		t.Errorf("stdout has no table f:\n%s", stdout.String())
	}
	got, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), capacity.BeginMarker+"\n"+stdout.String()+capacity.EndMarker) {
		t.Errorf("the page does not hold the tables between the markers:\n%s", got)
	}
}

func TestRunErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"version":1,"rows":[`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage: charts -in FILE.json"},
		{[]string{"-in", bad, "-out", ""}, "bad.json: truncated JSON"},
		{[]string{"-in", filepath.Join(t.TempDir(), "none.json")}, "no such file"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(tc.args, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q): error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}
