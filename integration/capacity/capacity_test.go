package capacity

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func readFixture(t *testing.T) (*Report, []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "small.json"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Read("small.json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return rep, data
}

// svgTexts parses an SVG document and returns its root element's name and
// every text it draws.
func svgTexts(t *testing.T, name string, data []byte) (root string, texts []string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	depth := 0
	inText := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: not valid XML: %v", name, err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				root = tok.Name.Local
			}
			depth++
			inText = tok.Name.Local == "text"
		case xml.EndElement:
			depth--
			inText = false
		case xml.CharData:
			if inText {
				texts = append(texts, strings.TrimSpace(string(tok)))
			}
		}
	}
	if depth != 0 {
		t.Fatalf("%s: unbalanced XML", name)
	}
	return root, texts
}

func TestCharts(t *testing.T) {
	rep, _ := readFixture(t)
	dir := t.TempDir()
	paths, err := rep.WriteCharts(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"throughput.svg":          {"dlock", "concurrency", "limit", "grants per second", "acquires in flight (log scale)", "16", "64"},
		"held-locks-latency.svg":  {"dlock p50", "dlock p99", "concurrency p50", "concurrency p99", "limit p50", "limit p99", "Lock+Unlock latency (ms)", "10,000"},
		"waiters-handoff.svg":     {"dlock", "concurrency", "limit", "handoff p99 (ms)", "waiters (log scale)"},
		"sessions-leader-cpu.svg": {"dlock idle", "dlock watched10", "concurrency idle", "concurrency watched10", "limit idle", "leader CPU-seconds per minute (log scale)"},
	}
	var files []string
	for _, p := range paths {
		files = append(files, filepath.Base(p))
	}
	slices.Sort(files)
	if wantFiles := slices.Sorted(mapKeys(want)); !slices.Equal(files, wantFiles) {
		t.Fatalf("files %v, want %v", files, wantFiles)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(p)
		root, texts := svgTexts(t, name, data)
		if root != "svg" {
			t.Errorf("%s: root element %q, want svg", name, root)
		}
		for _, w := range want[name] {
			if !slices.Contains(texts, w) {
				t.Errorf("%s: no text %q in %q", name, w, texts)
			}
		}
	}
	// The fixture has no limit row with watched10: no such series.
	_, texts := svgTexts(t, "sessions-leader-cpu.svg", mustRead(t, filepath.Join(dir, "sessions-leader-cpu.svg")))
	if slices.Contains(texts, "limit watched10") {
		t.Errorf("sessions-leader-cpu.svg: a legend entry for a series without points")
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestMarkdown(t *testing.T) {
	rep, _ := readFixture(t)
	var buf bytes.Buffer
	if err := rep.Markdown(&buf); err != nil {
		t.Fatal(err)
	}
	md := buf.String()
	for _, line := range []string{
		"Run started 2026-12-06T18:00:00Z on etcd 3.7.3, 3 members; each figure is the median of the runs given under its table.",
		"### a. Throughput: distinct locks",
		"| acquires in flight | metric | dlock | concurrency | limit | dlock/concurrency | dlock/limit |",
		"| 16 | grants/s | 1,200 | 1,000 | 1,500 | 1.20× | 0.80× |",
		"### b. Held locks",
		"| 10,000 | leader received bytes/s | 220,000 | 200,000 | 180,000 | 1.10× | 1.22× |",
		"### c. Waiters on one name",
		"| 100 | grants out of FIFO order | 0 | 0 | 0 | – | – |", // a count: no ratio
		"### d. Sessions: the leader's cost",
		"| sessions | variant | metric | dlock | concurrency | limit | dlock/concurrency | dlock/limit |",
		"| 100 | idle | leader CPU-s per minute | 1.20 | 1.00 | 0.700 | 1.20× | 1.71× |",
		"| 1,000 | watched10 | leader CPU-s per minute | 36.0 | 30.0 | – | 1.20× | – |", // no limit row
		"### e. Mass expiry",
		"| 100 | every waiter granted (s) | 11.5 | 12.0 | 11.2 | 0.96× | 1.03× |",
		"### f. Leader failover",
		"| 1,000 | sessions lost with a live process | 0 | 0 | – | – | – |",
		"- concurrency at 1,000: fixture: the limit has no session to renew",
		"Medians of 3 runs.",
	} {
		if !strings.Contains(md, line+"\n") {
			t.Errorf("markdown has no line %q:\n%s", line, md)
		}
	}
	if n := strings.Count(md, "\n### "); n != 6 {
		t.Errorf("%d tables, want 6", n)
	}
}

// TestDeterministic checks that the output depends on the document only:
// the rows in reverse order and the metrics re-encoded give the same bytes.
func TestDeterministic(t *testing.T) {
	rep, _ := readFixture(t)
	rev := *rep
	rev.Rows = slices.Clone(rep.Rows)
	slices.Reverse(rev.Rows)
	data, err := json.Marshal(rev)
	if err != nil {
		t.Fatal(err)
	}
	rep2, err := Read("reversed", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	if err := rep.Markdown(&a); err != nil {
		t.Fatal(err)
	}
	if err := rep2.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Errorf("markdown depends on the order of the rows")
	}
	c1, c2 := rep.Charts(), rep2.Charts()
	for i := range c1 {
		s1, err := c1[i].SVG()
		if err != nil {
			t.Fatal(err)
		}
		s2, err := c2[i].SVG()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(s1, s2) {
			t.Errorf("%s depends on the order of the rows", c1[i].File)
		}
	}
}

func TestEmptyScenario(t *testing.T) {
	doc := `{"version":1,"rows":[{"scenario":"e","load":10,"impl":"dlock","runs":1,"metrics":{"all_granted_s":3}}]}`
	rep, err := Read("one-row", strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rep.Markdown(&buf); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "No rows in this run.\n"); n != 5 {
		t.Errorf("%d scenarios said to have no rows, want 5:\n%s", n, buf.String())
	}
	for _, c := range rep.Charts() { // an empty chart is still drawn
		svg, err := c.SVG()
		if err != nil {
			t.Fatalf("%s: %v", c.File, err)
		}
		_, texts := svgTexts(t, c.File, svg)
		if !slices.ContainsFunc(texts, func(s string) bool { return strings.HasSuffix(s, "(no data in this run)") }) {
			t.Errorf("%s: does not say it has no data: %q", c.File, texts)
		}
	}
}

func TestMalformed(t *testing.T) {
	row := func(s string) string { return `{"version":1,"rows":[` + s + `]}` }
	ok := `{"scenario":"a","load":16,"impl":"dlock","runs":3,"metrics":{"grants_per_s":1}}`
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"empty", ``, "empty input"},
		{"truncated", `{"version":1,"rows":[`, "truncated JSON"},
		{"syntax", "{\"version\":1,\n \"rows\": [}\n", "line 2, column 11: not valid JSON"},
		{"type", `{"version":1,"rows":[{"scenario":"a","load":"many"}]}`, `field "rows.load"`},
		{"two documents", row(ok) + "\n" + row(ok), "more than one JSON document"},
		{"version", `{"version":2,"rows":[` + ok + `]}`, "version 2: this reader knows version 1 only"},
		{"no rows", `{"version":1,"rows":[]}`, "no rows"},
		{"scenario", row(`{"scenario":"g","load":1,"impl":"dlock","runs":1,"metrics":{"x":1}}`), `rows[0]: scenario "g": want one of a, b, c, d, e, f`},
		{"variant missing", row(`{"scenario":"d","load":1,"impl":"dlock","runs":1,"metrics":{"x":1}}`), `scenario d: variant "": want "idle" or "watched10"`},
		{"variant extra", row(`{"scenario":"a","load":1,"variant":"idle","impl":"dlock","runs":1,"metrics":{"x":1}}`), `scenario a: variant "idle": want "" (none)`},
		{"impl", row(`{"scenario":"a","load":1,"impl":"redis","runs":1,"metrics":{"x":1}}`), `impl "redis": want dlock, concurrency or limit`},
		{"load", row(`{"scenario":"a","load":0,"impl":"dlock","runs":1,"metrics":{"x":1}}`), "load must be a positive number (acquires in flight)"},
		{"runs", row(`{"scenario":"a","load":1,"impl":"dlock","runs":0,"metrics":{"x":1}}`), "runs 0: want at least 1"},
		{"metrics", row(`{"scenario":"a","load":1,"impl":"dlock","runs":1,"metric":{"x":1}}`), "no metrics"},
		{"negative", row(`{"scenario":"a","load":1,"impl":"dlock","runs":1,"metrics":{"x":-1}}`), "metric x is -1"},
		{"negative rate", row(`{"scenario":"a","load":1,"impl":"dlock","runs":1,"metrics":{"grants_per_s":-1}}`), "metric grants_per_s is -1"},
		{"duplicate", row(ok + "," + ok), "rows[1]: the same scenario, load, variant and impl as rows[0] (scenario a, load 16, impl dlock)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read("in.json", strings.NewReader(tc.doc))
			if err == nil {
				t.Fatalf("no error, want one containing %q", tc.want)
			}
			if !strings.HasPrefix(err.Error(), "capacity: in.json: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to start with %q and contain %q", err, "capacity: in.json: ", tc.want)
			}
		})
	}
}

func TestSplice(t *testing.T) {
	doc := "# B\n\n" + BeginMarker + "\nold\n" + EndMarker + "\nafter\n"
	got, err := Splice(doc, "new\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "# B\n\n" + BeginMarker + "\nnew\n" + EndMarker + "\nafter\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if _, err := Splice("# B\n", "new\n"); err == nil || !strings.Contains(err.Error(), "want the lines") {
		t.Errorf("no markers: error %v, want one naming the markers", err)
	}
}

// TestBenchmarksPage checks that BENCHMARKS.md has the markers the command
// splices the tables between, and that splicing is idempotent.
func TestBenchmarksPage(t *testing.T) {
	page := mustRead(t, filepath.Join("..", "..", "BENCHMARKS.md"))
	if strings.Count(string(page), BeginMarker) != 1 || strings.Count(string(page), EndMarker) != 1 {
		t.Fatalf("BENCHMARKS.md: want each capacity marker once")
	}
	rep, _ := readFixture(t)
	var buf bytes.Buffer
	if err := rep.Markdown(&buf); err != nil {
		t.Fatal(err)
	}
	once, err := Splice(string(page), buf.String())
	if err != nil {
		t.Fatal(err)
	}
	twice, err := Splice(once, buf.String())
	if err != nil {
		t.Fatal(err)
	}
	if once != twice {
		t.Errorf("splicing the same tables twice changed the page")
	}
}
