package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// CheckTimeout bounds one porcupine check.
const CheckTimeout = 30 * time.Second

// History records porcupine operations with call and return times from one
// monotonic clock. The zero value is not usable; call NewHistory. A History
// is safe for concurrent use.
type History struct {
	start time.Time

	mu  sync.Mutex
	ops []porcupine.Operation
}

// NewHistory returns an empty History whose clock starts now.
func NewHistory() *History { return &History{start: time.Now()} }

// Now returns the History's clock: nanoseconds since NewHistory, monotonic.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Add records one completed operation of client with the given call and
// return times (from Now).
func (h *History) Add(client int, call int64, in, out any, ret int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

// Ops returns a copy of the operations recorded so far.
func (h *History) Ops() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Operation(nil), h.ops...)
}

// Len returns the number of operations recorded so far.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// Check runs porcupine on ops against model, and, if the result is not Ok,
// writes the visualization to an artifact file whose path it returns.
func Check(tb testing.TB, model porcupine.Model, ops []porcupine.Operation) (porcupine.CheckResult, string) {
	tb.Helper()
	res, info := porcupine.CheckOperationsVerbose(model, ops, CheckTimeout)
	if res == porcupine.Ok {
		return res, ""
	}
	return res, Visualize(tb, model, info)
}

// Visualize writes porcupine's HTML visualization of info to the artifact
// directory and returns its path.
func Visualize(tb testing.TB, model porcupine.Model, info porcupine.LinearizationInfo) string {
	tb.Helper()
	dir := ArtifactDir(tb)
	name := strings.NewReplacer("/", "_", " ", "_").Replace(tb.Name())
	path := filepath.Join(dir, fmt.Sprintf("%s-%d.html", name, time.Now().UnixNano()))
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		tb.Errorf("faults: write porcupine visualization: %v", err)
		return ""
	}
	tb.Logf("porcupine visualization: %s", path)
	return path
}

// ArtifactDir returns DLOCK_ARTIFACTS, created if needed, or else a new
// temporary directory that is deliberately not removed at the end of the
// test, so a failure's artifacts survive it.
func ArtifactDir(tb testing.TB) string {
	tb.Helper()
	if d := os.Getenv("DLOCK_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			tb.Fatalf("faults: artifact dir %s: %v", d, err)
		}
		return d
	}
	d, err := os.MkdirTemp("", "dlock-artifacts-")
	if err != nil {
		tb.Fatalf("faults: artifact dir: %v", err)
	}
	return d
}
