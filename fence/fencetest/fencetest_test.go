package fencetest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/fencetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func memoryHighest(t *testing.T, g fence.Guard, name string) uint64 {
	return g.(*fence.MemoryGuard).Highest(name)
}

func TestMemoryGuard(t *testing.T) {
	newGuard := func(*testing.T) fence.Guard { return fence.NewMemoryGuard() }
	t.Run("WithHighest", func(t *testing.T) {
		fencetest.Run(t, fencetest.Config{New: newGuard, Highest: memoryHighest})
	})
	t.Run("WithoutHighest", func(t *testing.T) {
		fencetest.Run(t, fencetest.Config{New: newGuard})
	})
}

func TestInterleave(t *testing.T) {
	g := fence.NewMemoryGuard()
	seen := make(map[uint64]int)
	var mu sync.Mutex
	admitted, stale := fencetest.Interleave(t, func(seq uint64) error {
		mu.Lock()
		seen[seq]++
		mu.Unlock()
		return g.Admit(t.Context(), fence.Token{Name: "n", Seq: seq})
	})
	assert.Equal(t, fencetest.Top, admitted+stale)
	assert.Len(t, seen, fencetest.Top, "every token once")
	for seq := uint64(1); seq <= fencetest.Top; seq++ {
		assert.Equal(t, 1, seen[seq], "token %d", seq)
	}
	assert.Equal(t, uint64(fencetest.Top), g.Highest("n"))
}

// hotName is the lock name of the suite's Concurrent subtest.
const hotName = "fencetest/hot"

// A broken guard: a MemoryGuard's logic with one fault.
type brokenGuard struct {
	fault string
	mu    sync.Mutex
	marks map[string]uint64
	// "checks, then sets, not atomically": the admit in the window
	// between check and set, and its token's Seq.
	inWindow  chan struct{}
	windowSeq uint64
}

func (g *brokenGuard) Admit(ctx context.Context, t fence.Token) error {
	if g.fault != "skips Check" {
		if err := t.Check(); err != nil {
			return err
		}
	}
	if g.fault != "ignores ctx" && g.fault != "admits, then reports ctx" {
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	key := t.Name
	if g.fault == "one mark for all names" {
		key = ""
	}
	g.mu.Lock()
	h := g.marks[key]
	var mine chan struct{}
	if g.fault == "checks, then sets, not atomically" && t.Name == hotName && t.Seq >= h {
		// The window between the check and the set, scheduled at its
		// worst: under the Concurrent subtest's load, the first admit
		// in it that the check passed stays there until another admit
		// has set a higher mark (or 200 ms passed: the top token), then
		// sets its own mark on the check it made before. (A 50 µs sleep,
		// and a 2 ms window, let some CI runs interleave too little for
		// the suite to see the fault.)
		if g.inWindow == nil {
			mine = make(chan struct{})
			g.inWindow, g.windowSeq = mine, t.Seq
		}
		g.mu.Unlock()
		if mine != nil {
			select {
			case <-mine:
			case <-time.After(200 * time.Millisecond):
			}
		}
		g.mu.Lock()
		if g.inWindow == mine {
			g.inWindow = nil
		}
	}
	defer g.mu.Unlock()
	var stale bool
	switch g.fault {
	case "admits lower":
	case "rejects equal":
		stale = t.Seq <= h
	case "compares float64":
		stale = float64(t.Seq) < float64(h)
	case "compares text":
		stale = strconv.FormatUint(t.Seq, 10) < strconv.FormatUint(h, 10)
	default:
		stale = t.Seq < h
	}
	if _, ok := g.marks[key]; !ok && g.fault == "rejects a first token" {
		stale, h = true, t.Seq+1
	}
	if stale {
		switch g.fault {
		case "lowers the mark on rejection":
			g.marks[key] = t.Seq
		case "reports a wrong mark":
			h++
		case "reports plain ErrStaleToken":
			return fmt.Errorf("broken: %w", fence.ErrStaleToken)
		}
		return &fence.StaleTokenError{Name: t.Name, Seq: t.Seq, Highest: h}
	}
	g.marks[key] = t.Seq
	if g.inWindow != nil && g.inWindow != mine && t.Seq > g.windowSeq {
		close(g.inWindow)
		g.inWindow = nil
	}
	if g.fault == "admits, then reports ctx" {
		return ctx.Err()
	}
	return nil
}

func (g *brokenGuard) Highest(name string) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fault == "one mark for all names" {
		name = ""
	}
	return g.marks[name]
}

// The faults, each with the subtests that must catch it. A fault caught by
// no subtest is a guard the suite passes.
var faults = map[string][]string{
	"rejects a first token":             {"AdmitFirst", "AdmitEqual", "RejectLower", "NamesIndependent", "CancelledContext", "Concurrent", "LargeSeq", "NumericOrder"},
	"rejects equal":                     {"AdmitEqual", "RejectLower", "LargeSeq"},
	"admits lower":                      {"RejectLower", "NamesIndependent", "Concurrent", "LargeSeq", "NumericOrder"},
	"lowers the mark on rejection":      {"RejectLower", "NamesIndependent", "Concurrent", "NumericOrder"},
	"reports a wrong mark":              {"RejectLower", "NamesIndependent", "Concurrent", "LargeSeq", "NumericOrder"},
	"one mark for all names":            {"NamesIndependent"},
	"skips Check":                       {"NoToken", "InvalidToken"},
	"ignores ctx":                       {"CancelledContext"},
	"admits, then reports ctx":          {"CancelledContext"},
	"checks, then sets, not atomically": {"Concurrent"},
	"compares float64":                  {"LargeSeq"},
	"compares text":                     {"NamesIndependent", "Concurrent", "LargeSeq", "NumericOrder"},
	"reports plain ErrStaleToken":       nil,
}

const faultEnv = "FENCETEST_FAULT"

// TestBrokenGuard runs the suite against the broken guard named by
// $FENCETEST_FAULT; TestSuiteCatchesFaults runs it in a child process.
func TestBrokenGuard(t *testing.T) {
	fault := os.Getenv(faultEnv)
	if fault == "" {
		t.Skip("run by TestSuiteCatchesFaults")
	}
	fencetest.Run(t, fencetest.Config{
		New: func(*testing.T) fence.Guard { return &brokenGuard{fault: fault, marks: map[string]uint64{}} },
		Highest: func(t *testing.T, g fence.Guard, name string) uint64 {
			return g.(*brokenGuard).Highest(name)
		},
	})
}

// Every fault fails exactly the subtests listed for it: each subtest can
// fail, and fails only for its own reason.
func TestSuiteCatchesFaults(t *testing.T) {
	if os.Getenv(faultEnv) != "" {
		t.Skip("in the child")
	}
	failed := regexp.MustCompile(`(?m)^\s*--- FAIL: TestBrokenGuard/(\w+) `)
	for fault, want := range faults {
		t.Run(fault, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestBrokenGuard$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), faultEnv+"="+fault)
			out, err := cmd.CombinedOutput()
			var got []string
			for _, m := range failed.FindAllStringSubmatch(string(out), -1) {
				got = append(got, m[1])
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(want))
			assert.Equal(t, want, got, "failed subtests")
			if len(want) == 0 {
				require.NoError(t, err, "%s", out)
			} else {
				var exit *exec.ExitError
				require.ErrorAs(t, err, &exit, "%s", out)
			}
			if t.Failed() {
				t.Logf("child output:\n%s", out)
			}
		})
	}
}
