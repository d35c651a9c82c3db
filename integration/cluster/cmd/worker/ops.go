package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/integration/cluster/history"
)

// use is one grant's operations on the resource.
type use struct {
	w    *worker
	g    int
	tok  uint64 // the token presented (the first grant's under the plant first-token)
	mode string // "x" or "s"
	done <-chan struct{}
}

// round is one critical section, written as a careless client would write
// it: Done is checked once, before the round (by use's loop), and not
// again until the round is over. It enters the unfenced register (a read;
// then the phase line "inside", where the nemesis pauses a holder), reads
// the fenced register, works 5–20 ms, writes the fenced register (read +
// 1, exclusive modes only), and exits the unfenced register (read + 1,
// exclusive). A holder paused inside resumes and finishes the section:
// the unfenced register shows the double grant, the fenced one refuses
// the stale write. The semaphore skips the fenced register: its permits
// overlap by design, and a high-water mark would refuse earlier permits.
func (u *use) round() {
	v, ok := u.enter()
	if !ok {
		return
	}
	fenced := u.w.cfg.workload != "semaphore"
	// With a guard, the control on the real resource: its counter is read
	// before the phase line "inside" (where the nemesis pauses a holder),
	// as the unfenced register's value is, and written back (+1) after
	// the fenced write.
	// The fenced read too comes before it there, so that a holder paused
	// inside always writes late: the guard must refuse that write.
	var ctl, fv int64
	control := false
	readFenced := func() {
		if fenced {
			fv, ok = u.fenced(true, 0)
		}
	}
	if u.w.guard != nil {
		if fenced && u.mode == "x" && u.w.guard.control() {
			ctl, control = u.controlRead()
		}
		readFenced()
	}
	u.w.phase("inside", u.g)
	if u.w.guard == nil {
		readFenced()
	}
	time.Sleep(u.w.between(5*time.Millisecond, 20*time.Millisecond)) // the work
	if fenced && ok && u.mode == "x" {
		if u.w.guard != nil {
			u.w.phase("writing", u.g) // resource-cut aims here
		}
		u.fenced(false, fv+1)
	}
	if control {
		u.controlWrite(ctl + 1)
	}
	u.exit(v)
	u.w.phase("use", u.g)
}

// fenced reads the fenced register, or writes v to it.
func (u *use) fenced(read bool, v int64) (int64, bool) {
	if u.w.guard != nil {
		return u.guardFenced(read, v)
	}
	q := url.Values{"lock": {u.w.cfg.lock}, "tok": {strconv.FormatUint(u.tok, 10)}}
	method := http.MethodGet
	if !read {
		method = http.MethodPost
		q.Set("v", strconv.FormatInt(v, 10))
	}
	return u.op(history.Fenced, read, v, method, "/fenced", q)
}

// enter enters the unfenced register's critical section: a read.
func (u *use) enter() (int64, bool) {
	q := url.Values{"lock": {u.w.cfg.lock}, "who": {u.who()}, "mode": {u.mode}}
	return u.op(history.Unfenced, true, 0, http.MethodPost, "/unfenced/enter", q)
}

// exit leaves the unfenced register's critical section. Exclusive, it
// writes read + 1 (expecting read): a write. Shared, it writes nothing and
// the reply is the register's value: a read.
func (u *use) exit(read int64) {
	v := read
	if u.mode == "x" {
		v = read + 1
	}
	q := url.Values{
		"lock": {u.w.cfg.lock}, "who": {u.who()},
		"v": {strconv.FormatInt(v, 10)}, "expect": {strconv.FormatInt(read, 10)},
	}
	u.op(history.Unfenced, u.mode != "x", v, http.MethodPost, "/unfenced/exit", q)
}

func (u *use) who() string { return fmt.Sprintf("w%d/g%d", u.w.cfg.id, u.g) }

// op makes one request and records it as Event op: T and Call just before
// the request, Ret right after the reply (0 if there was none), Value the
// value read (a read) or written (a write), Result "ok" (200), "stale"
// (409: refused by the guard) or "error". It returns the value the
// resource replied and whether the result was ok.
func (u *use) op(reg string, read bool, v int64, method, path string, q url.Values) (int64, bool) {
	ev := history.Event{G: u.g, Kind: history.Op, Tok: u.tok, Mode: u.mode, Reg: reg, Read: read, Result: "error"}
	if !read {
		ev.Value = v
	}
	req, err := http.NewRequest(method, u.w.cfg.resource+path+"?"+q.Encode(), nil)
	if err != nil {
		ev.T = history.Now()
		ev.Err = err.Error()
		u.w.emit(ev)
		return 0, false
	}
	ev.Call = history.Now()
	ev.T = ev.Call
	resp, err := u.w.http.Do(req)
	var body []byte
	if err == nil {
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err != nil {
		ev.Err = err.Error()
		u.w.emit(ev)
		return 0, false
	}
	ev.Ret = history.Now()
	text := strings.TrimSpace(string(body))
	var got int64
	switch resp.StatusCode {
	case http.StatusOK:
		got, err = strconv.ParseInt(text, 10, 64)
		if err != nil {
			ev.Err = fmt.Sprintf("reply %q: %v", text, err)
			break
		}
		ev.Result = "ok"
		if read {
			ev.Value = got
		}
	case http.StatusConflict:
		ev.Result = "stale"
	default:
		ev.Err = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, text)
	}
	u.w.emit(ev)
	return got, ev.Result == "ok"
}
