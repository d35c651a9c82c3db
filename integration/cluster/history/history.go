// Package history is the record the cluster harness's processes keep and
// its checkers read: one JSON object per line, in files under a run's
// artifacts directory. Workers write Events (history/w<N>.jsonl); the
// resource writes Records (resource.jsonl).
//
// Times are wall-clock Unix nanoseconds. Every process of a run is on the
// same machine, so their clocks are one clock (the harness's clock faults
// act on the library's local deadlines through a seam, not on the
// machine's clock).
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// Event kinds a worker writes.
const (
	// Acquire: the worker calls Lock (Acquire, RLock, Campaign). T is the call.
	Acquire = "acquire"
	// Grant: Lock returned a grant. T is when it returned; Tok the token
	// (Seq); Mode "x" (exclusive) or "s" (shared: a semaphore permit, a
	// read lock).
	Grant = "grant"
	// Fail: Lock returned an error (Err), T when it returned.
	Fail = "fail"
	// Op: one operation on a register at the resource, under grant G.
	// Call and Ret bracket it (Ret 0: no reply, the outcome is unknown).
	Op = "op"
	// End: the grant ended, as the holder saw it. T is when the holder
	// stopped acting: just before calling Unlock (How "unlock"), or when it
	// saw Done closed (How "done", Err the grant's Err). Deadline is the
	// session's local deadline at that moment when the grant ended because
	// that deadline passed (0 otherwise): Done closed then, even if the
	// worker (starved of CPU) noticed later. Open is the last time the
	// holder found Done still open: Done cannot have closed before it.
	End = "end"
	// Released: Unlock returned (Err its error, if any). T is when.
	Released = "released"
	// Do: one call of the intent journal's Do (the payments workload).
	// Op is the operation, Key the idempotency key fn was given ("" if fn
	// was not called), Call and Ret bracket it, Pending says it finishes
	// an intent an earlier holder left open (from Journal.Pending).
	// Result: "ok", "failed" (an outcome recorded as a failure),
	// "superseded" (a later holder wrote to the journal), "ended" (the
	// grant had ended), "error" (fn's or the store's error: the intent
	// stays open).
	Do = "do"
	// Pay: one request to the payments API, made by fn under a Do. Op and
	// Key as sent ("" when the request carried no Idempotency-Key), Call
	// and Ret (0: no reply) bracket it, Value is the HTTP status.
	Pay = "pay"
)

// Unsent is the Result of an op that never reached the resource (no
// connection could be made): it had no effect.
const Unsent = "unsent"

// Registers at the resource.
const (
	Fenced   = "fenced"   // checks the token: the guard under test
	Unfenced = "unfenced" // the control: no check at all
	// Control is, in a run with a guard (a real resource), the control
	// on that resource: a counter in the fenced register's row, read and
	// then written (read + 1) without the guard. A write's Value is what
	// it wrote; the checker counts the acknowledged ones against the
	// counter's final value (lost updates).
	Control = "control"
)

// Event is one line of a worker's history.
type Event struct {
	W        int    `json:"w"`             // worker index
	Workload string `json:"wl"`            // "mutex", "semaphore", "rwmutex", "election", "redis", "redlock", or a payments workload
	G        int    `json:"g"`             // grant number within the worker, from 1
	Kind     string `json:"k"`             // one of the kinds above
	T        int64  `json:"t"`             // Unix nanoseconds
	Tok      uint64 `json:"tok,omitempty"` // fencing token (Seq); 0 for Redlock
	Mode     string `json:"mode,omitempty"`
	Err      string `json:"err,omitempty"`
	Via      string `json:"via,omitempty"`   // acquire and grant: "try" (TryLock, TryAcquire, TryRLock), "all" (lock.LockAll), "" (Lock, Acquire, RLock, Campaign)
	Lease    int64  `json:"lease,omitempty"` // grant: the session's lease

	// Op fields.
	Reg    string `json:"reg,omitempty"`
	Read   bool   `json:"read,omitempty"` // a read (else a write)
	Value  int64  `json:"v,omitempty"`    // value read, or written
	Result string `json:"res,omitempty"`  // "ok", "stale" (refused by the guard), "error" (outcome unknown), Unsent
	Call   int64  `json:"call,omitempty"`
	Ret    int64  `json:"ret,omitempty"`
	// Raise: the guard admits a read as it admits a write, raising the
	// mark to the read's token (pgfence: every admitted transaction
	// raises it). Without it a read leaves the mark (fence.MemoryGuard's
	// rule in cmd/resource).
	Raise bool `json:"raise,omitempty"`
	// Blind: a read whose value is not known (redisfence's Admit alone:
	// the value is read after it, in a separate command); only whether
	// it was admitted is checked.
	Blind bool `json:"blind,omitempty"`

	// Do and Pay fields.
	Op      string `json:"op,omitempty"`
	Key     string `json:"key,omitempty"`
	Pending bool   `json:"pending,omitempty"`

	// End fields.
	How      string `json:"how,omitempty"`
	Deadline int64  `json:"dl,omitempty"`
	Open     int64  `json:"open,omitempty"` // when the holder last found Done open (stamped before that check)
}

// Resource record kinds.
const (
	// Write: the fenced register admitted a write (Tok, Value) for Lock,
	// in the order the resource applied them.
	Write = "write"
	// Overlap: two critical sections at the resource overlapped where the
	// lock forbids it (the unfenced control's evidence of a double grant):
	// an exclusive one with any other, or more shared ones than Cap.
	Overlap = "overlap"
	// LostUpdate: an unfenced write whose expected value was not the
	// register's value (someone wrote in between).
	LostUpdate = "lost-update"
)

// Record is one line of the resource's log.
type Record struct {
	Kind  string `json:"k"`
	Lock  string `json:"lock"`
	T     int64  `json:"t"`
	Tok   uint64 `json:"tok,omitempty"`
	Value int64  `json:"v,omitempty"`
	A     string `json:"a,omitempty"` // "w3/g7": who was inside
	B     string `json:"b,omitempty"` // who entered while A was inside
}

// Writer appends JSON lines to a file, one Write per line, synced on Close.
// It is safe for concurrent use.
type Writer struct {
	mu sync.Mutex
	f  *os.File
	w  *bufio.Writer
}

// Create creates (truncates) path and its directory.
func Create(path string) (*Writer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &Writer{f: f, w: bufio.NewWriter(f)}, nil
}

// Write appends v as one line and flushes it to the file (not to disk: a
// killed process's lines survive, a lost machine's need not).
func (w *Writer) Write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return w.w.Flush()
}

// Sync flushes what was written and syncs the file to disk.
func (w *Writer) Sync() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.w.Flush(); err != nil {
		return err
	}
	return w.f.Sync()
}

// Close flushes, syncs and closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.w.Flush()
	if e := w.f.Sync(); err == nil {
		err = e
	}
	if e := w.f.Close(); err == nil {
		err = e
	}
	return err
}

// ReadLines decodes every line of path into a T. A torn last line (a
// process killed mid-write) is skipped; any other bad line is an error.
func ReadLines[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var bad error
	for n := 1; sc.Scan(); n++ {
		if bad != nil {
			return nil, bad
		}
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			bad = fmt.Errorf("%s:%d: %w", path, n, err)
			continue
		}
		out = append(out, v)
	}
	return out, sc.Err()
}

// ReadWorkers reads every w*.jsonl in dir, in time order (ties by worker).
func ReadWorkers(dir string) ([]Event, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "w*.jsonl"))
	if err != nil {
		return nil, err
	}
	var all []Event
	for _, p := range paths {
		ev, err := ReadLines[Event](p)
		if err != nil {
			return nil, err
		}
		all = append(all, ev...)
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].T != all[j].T {
			return all[i].T < all[j].T
		}
		return all[i].W < all[j].W
	})
	return all, nil
}

// Time converts Unix nanoseconds to a time.Time (zero for 0).
func Time(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Now is time.Now in Unix nanoseconds.
func Now() int64 { return time.Now().UnixNano() }
