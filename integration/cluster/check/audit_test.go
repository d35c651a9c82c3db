package check

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dlock-go/dlock/integration/cluster/history"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckAudit(t *testing.T) {
	write := func(tok uint64, v int64, res string) history.Event {
		e := history.Event{W: 1, Workload: "mutex", G: 1, Kind: history.Op, Reg: history.Fenced, Tok: tok, Value: v, Result: res, Call: 1}
		if res == "ok" || res == "stale" || res == history.Unsent {
			e.Ret = 2
		}
		return e
	}
	ctl := func(v int64, res string) history.Event {
		return history.Event{W: 1, Workload: "mutex", G: 1, Kind: history.Op, Reg: history.Control, Value: v, Result: res}
	}
	rec := func(tok uint64, v int64) history.Record {
		return history.Record{Kind: history.Write, Lock: "dlock-mutex", Tok: tok, Value: v}
	}
	run := func(t *testing.T, final string, events []history.Event, audit ...history.Record) *Result {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "control.json"), []byte(final), 0o644))
		rep := &Result{}
		rep.checkAudit(Settings{Dir: dir, Guard: "pg", Workloads: []string{"mutex"}}, events, audit, nil)
		return rep
	}

	t.Run("Kept", func(t *testing.T) {
		rep := run(t, `{"dlock-mutex": 3}`, []history.Event{
			write(2, 1, "ok"), write(2, 2, "error"), write(3, 3, "error"), write(1, 9, "stale"), write(1, 8, history.Unsent),
			ctl(1, "ok"), ctl(2, "ok"), ctl(3, "ok"), ctl(4, "ok"), ctl(5, "error"), ctl(6, history.Unsent),
		}, rec(2, 1), rec(3, 3)) // the write of 2 without a reply did not commit, that of 3 did
		assert.Empty(t, rep.Failures)
		assert.Contains(t, rep.Notes[0], "2 fenced writes committed, 2 refused or unsent; 2 had no reply, of which 1 committed")
		assert.Equal(t, []Control{{Workload: "mutex", Acked: 4, Unknown: 1, Final: 3, Lost: 1}}, rep.Controls)
	})
	t.Run("Broken", func(t *testing.T) {
		rep := run(t, `{"dlock-mutex": 0}`, []history.Event{
			write(2, 1, "ok"), write(1, 9, "stale"),
		}, rec(1, 9), rec(5, 5)) // the refused write committed, another nobody sent; the acknowledged one is gone
		assert.Equal(t, []string{
			"guard: a write the guard refused was committed: dlock-mutex tok 1 value 9: committed 1 times, told refused (or unsent) 1 times",
			"guard: a committed write no worker sent: dlock-mutex tok 5 value 5: committed 1 times, sent 0 times",
			"guard: an acknowledged write is not in the resource (lost): dlock-mutex tok 2 value 1: acknowledged 1 times, committed 0 times",
		}, rep.Failures)
	})
	t.Run("NoCounters", func(t *testing.T) {
		rep := &Result{}
		rep.checkAudit(Settings{Dir: t.TempDir(), Guard: "pg", Workloads: []string{"mutex"}}, nil, nil, nil)
		require.Len(t, rep.Failures, 1)
		assert.Contains(t, rep.Failures[0], "guard: cannot read the control's counters")
	})
}
