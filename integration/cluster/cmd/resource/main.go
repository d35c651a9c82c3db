// Command resource is the shared resource of the cluster fault harness:
// one HTTP server holding, per lock name, two registers that the workers
// use under their grants, and a log (history.Record JSONL) of what it saw.
//
//   - The fenced register checks the token each request presents, with
//     fence.MemoryGuard's rule: a token is admitted if it is at least the
//     highest one admitted for the lock; a read does not raise that mark,
//     a write does. It is the guard under test: with a correct lock and
//     guard, a stale holder's write is refused, never applied.
//   - The unfenced register checks nothing. It is the control: it tracks
//     who is inside a critical section and logs every overlap the lock
//     forbids and every lost update, the evidence of a double grant that
//     a fence would have made harmless.
//
// Usage:
//
//	resource -listen 10.0.0.2:8080 -log run/resource.jsonl [-cap dlock-semaphore=2] [-plant admit-lower] [-guard http | -guard grpc -grpc 10.0.0.2:9090]
//
// It prints "LISTEN <addr>" on stdout once it accepts connections, and
// exits 0 on SIGTERM or SIGINT after closing the log (1 on any other
// error, logged to stderr). The HTTP interface (every parameter in the
// query; bodies are decimal values):
//
//	GET  /fenced?lock=L&tok=N            200 "<v>" if N >= mark (the mark is unchanged), else 409
//	POST /fenced?lock=L&tok=N&v=V        if N >= mark: mark = N, value = V, Record write, 200 "<V>"; else 409
//	POST /unfenced/enter?lock=L&who=W&mode=x|s
//	                                     200 "<v>"; Record overlap for each occupant W conflicts with
//	POST /unfenced/exit?lock=L&who=W&v=V&expect=E
//	                                     mode x: Record lost-update if value != E, then value = V;
//	                                     W leaves; 200 "<v>" (the value after the exit); 404 if W is not inside
//	POST /unfenced/evict?who=wN          every entry of worker wN leaves (for a worker the harness killed)
//	GET  /healthz                        200
//
// Occupancy per lock: a mode-x occupant excludes every other; mode-s
// occupants may share, up to the lock's cap (-cap; unlimited by default).
// Who is "w<N>/g<M>": a worker enters with one grant at a time, so an
// enter by wN evicts wN's earlier entries of that lock (an exit that never
// arrived, the worker's reply lost or the worker restarted).
//
// The plant admit-lower makes the fenced register admit every token (the
// mark still only rises): a broken guard, for checking the checkers.
//
// With -guard http the fenced register is also served behind
// contrib/httpfence's Middleware (a fence.MemoryGuard admits the token the
// request's Dlock-Fence-Token header carries; 409 when stale), as an
// application serves a fenced endpoint:
//
//	GET  /guarded?lock=L                 the token from the header: as GET /fenced
//	POST /guarded?lock=L&v=V             as POST /fenced
//
// The handler takes the token from the request's context and checks it
// again under the registers' lock, atomically with the write, as
// httpfence's documentation asks (the middleware's admission alone is
// not atomic with the handler). With -guard grpc the same register is
// served over gRPC behind grpcfence's interceptors (grpc.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/dlock-go/dlock/contrib/httpfence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/cluster/history"
	"github.com/dlock-go/dlock/integration/cluster/internal/httpserve"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve HTTP on")
	logPath := flag.String("log", "resource.jsonl", "path of the history.Record JSONL log")
	plant := flag.String("plant", "", "planted bug: admit-lower (the fenced register admits every token)")
	caps := flag.String("cap", "", "shared-occupancy caps, LOCK=N,... (default unlimited)")
	guard := flag.String("guard", "", `"http": serve /guarded behind httpfence.Middleware; "grpc": serve the register service behind grpcfence's interceptors on -grpc`)
	grpcListen := flag.String("grpc", "", "address to serve gRPC on (-guard grpc)")
	flag.Parse()
	if *guard != "" && *guard != "http" && (*guard != "grpc" || *grpcListen == "") {
		log.Fatalf("-guard %q: want http, grpc (with -grpc) or nothing", *guard)
	}
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("resource: ")
	if err := run(*listen, *logPath, *plant, *caps, *guard, *grpcListen); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(listen, logPath, plant, caps, guard, grpcListen string) error {
	if plant != "" && plant != "admit-lower" {
		return fmt.Errorf("-plant %q: want admit-lower or nothing", plant)
	}
	capOf, err := parseCaps(caps)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	lw, err := history.Create(logPath)
	if err != nil {
		return err
	}
	r := newResource(lw, capOf, plant == "admit-lower")
	// The guard of /guarded and of the register service: the middleware's
	// or interceptor's, and the one the handler checks again with the
	// write. Under the plant it admits every token.
	var g fence.Guard = fence.NewMemoryGuard()
	if plant == "admit-lower" {
		g = admitAll{}
	}
	if guard == "http" {
		r.guarded(g)
	}
	var gs *grpc.Server
	if guard == "grpc" {
		gln, err := net.Listen("tcp", grpcListen)
		if err != nil {
			lw.Close()
			return err
		}
		gs = r.grpcServer(g)
		go gs.Serve(gln) //nolint:errcheck // ends with Stop
		log.Printf("gRPC on %s", gln.Addr())
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		lw.Close()
		return err
	}
	log.Printf("listening on %s, log %s, caps %v, plant %q", ln.Addr(), logPath, capOf, plant)
	err = httpserve.Run(ctx, ln, r, r.failed, 5*time.Second)
	if gs != nil {
		gs.Stop()
	}
	if e := lw.Close(); err == nil {
		err = e
	}
	return err
}

// parseCaps parses "L1=N1,L2=N2".
func parseCaps(s string) (map[string]int, error) {
	caps := make(map[string]int)
	if s == "" {
		return caps, nil
	}
	for _, kv := range strings.Split(s, ",") {
		name, n, ok := strings.Cut(kv, "=")
		c, err := strconv.Atoi(n)
		if !ok || name == "" || err != nil || c < 1 {
			return nil, fmt.Errorf("-cap %q: want LOCK=N with N >= 1", kv)
		}
		caps[name] = c
	}
	return caps, nil
}

// resource is the registers and their log. It is safe for concurrent use:
// one mutex orders every request, so the log's order is the order the
// registers applied them.
type resource struct {
	log        *history.Writer
	caps       map[string]int // shared-occupancy cap per lock; absent: unlimited
	admitLower bool
	guard      fence.Guard // of /guarded and the register service
	failed     chan error  // the first log write error (the run's evidence is broken)
	mux        *http.ServeMux
	mu         sync.Mutex
	fenced     map[string]*fencedReg
	unfenced   map[string]*unfencedReg
	failedOnce sync.Once
}

type fencedReg struct {
	mark  uint64 // highest token admitted to write
	value int64
}

type unfencedReg struct {
	value      int64
	lastWriter string     // who wrote value
	inside     []occupant // in order of entry
}

type occupant struct {
	who  string
	mode string // "x" or "s"
}

func newResource(lw *history.Writer, caps map[string]int, admitLower bool) *resource {
	r := &resource{
		log: lw, caps: caps, admitLower: admitLower,
		failed:   make(chan error, 1),
		fenced:   make(map[string]*fencedReg),
		unfenced: make(map[string]*unfencedReg),
		mux:      http.NewServeMux(),
	}
	r.mux.HandleFunc("GET /fenced", r.fencedRead)
	r.mux.HandleFunc("POST /fenced", r.fencedWrite)
	r.mux.HandleFunc("POST /unfenced/enter", r.enter)
	r.mux.HandleFunc("POST /unfenced/exit", r.exit)
	r.mux.HandleFunc("POST /unfenced/evict", r.evict)
	r.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	return r
}

// admitAll is the plant admit-lower's guard: it admits every token.
type admitAll struct{}

func (admitAll) Admit(context.Context, fence.Token) error { return nil }

// guarded serves the fenced register behind httpfence.Middleware(g) too;
// the handler checks the token again with g, atomically with the write.
func (r *resource) guarded(g fence.Guard) {
	r.guard = g
	mw := httpfence.Middleware(g)
	r.mux.Handle("GET /guarded", mw(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { r.serveGuarded(w, req, false) })))
	r.mux.Handle("POST /guarded", mw(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { r.serveGuarded(w, req, true) })))
}

// serveGuarded is serveFenced with the token the middleware admitted.
func (r *resource) serveGuarded(w http.ResponseWriter, req *http.Request, write bool) {
	tok, ok := fence.FromContext(req.Context())
	if !ok {
		http.Error(w, "no token in the request's context", http.StatusInternalServerError)
		return
	}
	q := req.URL.Query()
	q.Set("tok", strconv.FormatUint(tok.Seq, 10))
	if q.Get("lock") != tok.Name {
		http.Error(w, fmt.Sprintf("lock %q, token of %q", q.Get("lock"), tok.Name), http.StatusBadRequest)
		return
	}
	var v int64
	if write {
		qq := query{req: req}
		v = qq.int("v")
		if qq.bad(w) {
			return
		}
	}
	value, mark, err := r.guardedOp(req.Context(), tok.Name, tok.Seq, write, v)
	switch {
	case errors.Is(err, errStale):
		http.Error(w, fmt.Sprintf("stale token %d < %d", tok.Seq, mark), http.StatusConflict)
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		fmt.Fprint(w, value)
	}
}

func (r *resource) ServeHTTP(w http.ResponseWriter, req *http.Request) { r.mux.ServeHTTP(w, req) }

// record appends rec to the log; r.mu is held. A failed write is
// reported once on r.failed (run stops the server) and answered 500.
func (r *resource) record(rec history.Record) error {
	err := r.log.Write(rec)
	if err != nil {
		r.failedOnce.Do(func() { r.failed <- fmt.Errorf("log: %w", err) })
	}
	return err
}

// admits reports whether tok may act on a register whose mark is mark.
// Seq 0 is no token (fence.Token's rule): never admitted by the guard.
func (r *resource) admits(tok, mark uint64) bool {
	return r.admitLower || (tok != 0 && tok >= mark)
}

func (r *resource) fencedRead(w http.ResponseWriter, req *http.Request) { r.serveFenced(w, req, false) }

func (r *resource) fencedWrite(w http.ResponseWriter, req *http.Request) { r.serveFenced(w, req, true) }

// serveFenced serves the fenced register: a token below its mark is refused
// (409); else a read replies the value, a write sets mark and value,
// records the write and replies the value.
func (r *resource) serveFenced(w http.ResponseWriter, req *http.Request, write bool) {
	q := query{req: req}
	name, tok := q.str("lock"), q.uint("tok")
	var v int64
	if write {
		v = q.int("v")
	}
	if q.bad(w) {
		return
	}
	value, mark, err := r.fencedOp(name, tok, write, v)
	switch {
	case errors.Is(err, errStale):
		http.Error(w, fmt.Sprintf("stale token %d < %d", tok, mark), http.StatusConflict)
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		fmt.Fprint(w, value)
	}
}

var errStale = errors.New("stale token")

// fencedOp applies one op to the fenced register of name: a token below
// its mark is refused (errStale, with the mark); else a read returns the
// value, a write sets mark and value and records the write.
func (r *resource) fencedOp(name string, tok uint64, write bool, v int64) (value int64, mark uint64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg := r.fencedReg(name)
	if !r.admits(tok, reg.mark) {
		return 0, reg.mark, errStale
	}
	return r.apply(reg, name, tok, write, v)
}

// guardedOp is fencedOp behind r.guard (the guard of /guarded and of the
// register service) instead of the register's own mark: the handler's
// check again, under r.mu with the write, as httpfence and grpcfence ask
// (their admission alone is not atomic with the handler). A stale token
// is errStale with the guard's highest token.
func (r *resource) guardedOp(ctx context.Context, name string, tok uint64, write bool, v int64) (value int64, mark uint64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.guard.Admit(ctx, fence.Token{Name: name, Seq: tok}); err != nil {
		var st *fence.StaleTokenError
		if errors.As(err, &st) {
			return 0, st.Highest, errStale
		}
		return 0, 0, err
	}
	return r.apply(r.fencedReg(name), name, tok, write, v)
}

// apply does an admitted op on reg: a read returns the value, a write
// sets mark and value and records the write. r.mu is held.
func (r *resource) apply(reg *fencedReg, name string, tok uint64, write bool, v int64) (value int64, mark uint64, err error) {
	if write {
		reg.mark = max(reg.mark, tok)
		reg.value = v
		if err := r.record(history.Record{Kind: history.Write, Lock: name, T: history.Now(), Tok: tok, Value: v}); err != nil {
			return 0, reg.mark, err
		}
	}
	return reg.value, reg.mark, nil
}

func (r *resource) enter(w http.ResponseWriter, req *http.Request) {
	q := query{req: req}
	name, who, mode := q.str("lock"), q.who("who"), q.mode("mode")
	if q.bad(w) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	reg := r.unfencedReg(name)
	worker, _, _ := strings.Cut(who, "/")
	reg.leave(func(o occupant) bool { return strings.HasPrefix(o.who, worker+"/") })
	shared := 1 // the entering one, if shared
	for _, o := range reg.inside {
		if o.mode == "s" {
			shared++
		}
	}
	capacity, limited := r.caps[name]
	overCap := mode == "s" && limited && shared > capacity
	now := history.Now()
	for _, o := range reg.inside {
		if mode == "x" || o.mode == "x" || overCap {
			if err := r.record(history.Record{Kind: history.Overlap, Lock: name, T: now, A: o.who, B: who}); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
	}
	reg.inside = append(reg.inside, occupant{who: who, mode: mode})
	fmt.Fprint(w, reg.value)
}

func (r *resource) exit(w http.ResponseWriter, req *http.Request) {
	q := query{req: req}
	name, who, v, expect := q.str("lock"), q.who("who"), q.int("v"), q.int("expect")
	if q.bad(w) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	reg := r.unfencedReg(name)
	var found *occupant
	for i := range reg.inside {
		if reg.inside[i].who == who {
			found = &reg.inside[i]
			break
		}
	}
	if found == nil {
		http.Error(w, fmt.Sprintf("%s is not inside %s", who, name), http.StatusNotFound)
		return
	}
	if found.mode == "x" {
		if reg.value != expect {
			// A: who wrote in between; B: whose update that write lost.
			rec := history.Record{Kind: history.LostUpdate, Lock: name, T: history.Now(), Value: reg.value, A: reg.lastWriter, B: who}
			if err := r.record(rec); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		reg.value, reg.lastWriter = v, who
	}
	reg.leave(func(o occupant) bool { return o.who == who })
	fmt.Fprint(w, reg.value)
}

func (r *resource) evict(w http.ResponseWriter, req *http.Request) {
	q := query{req: req}
	worker := q.str("who")
	if q.bad(w) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, reg := range r.unfenced {
		reg.leave(func(o occupant) bool { return strings.HasPrefix(o.who, worker+"/") })
	}
}

// leave removes the occupants gone reports.
func (reg *unfencedReg) leave(gone func(occupant) bool) {
	kept := reg.inside[:0]
	for _, o := range reg.inside {
		if !gone(o) {
			kept = append(kept, o)
		}
	}
	reg.inside = kept
}

func (r *resource) fencedReg(name string) *fencedReg {
	reg := r.fenced[name]
	if reg == nil {
		reg = &fencedReg{}
		r.fenced[name] = reg
	}
	return reg
}

func (r *resource) unfencedReg(name string) *unfencedReg {
	reg := r.unfenced[name]
	if reg == nil {
		reg = &unfencedReg{}
		r.unfenced[name] = reg
	}
	return reg
}

// query reads a request's query parameters, keeping the first problem.
type query struct {
	req *http.Request
	err error
}

func (q *query) str(key string) string {
	v := q.req.URL.Query().Get(key)
	if v == "" && q.err == nil {
		q.err = fmt.Errorf("missing %s", key)
	}
	return v
}

func (q *query) int(key string) int64 {
	n, err := strconv.ParseInt(q.str(key), 10, 64)
	if err != nil && q.err == nil {
		q.err = fmt.Errorf("%s: %w", key, err)
	}
	return n
}

func (q *query) uint(key string) uint64 {
	n, err := strconv.ParseUint(q.str(key), 10, 64)
	if err != nil && q.err == nil {
		q.err = fmt.Errorf("%s: %w", key, err)
	}
	return n
}

// who reads a "w<N>/g<M>" parameter.
func (q *query) who(key string) string {
	v := q.str(key)
	if worker, _, ok := strings.Cut(v, "/"); (!ok || worker == "") && q.err == nil {
		q.err = fmt.Errorf("%s %q: want w<N>/g<M>", key, v)
	}
	return v
}

func (q *query) mode(key string) string {
	v := q.str(key)
	if v != "x" && v != "s" && q.err == nil {
		q.err = fmt.Errorf("%s %q: want x or s", key, v)
	}
	return v
}

// bad answers 400 if a parameter was missing or malformed.
func (q *query) bad(w http.ResponseWriter) bool {
	if q.err == nil {
		return false
	}
	http.Error(w, q.err.Error(), http.StatusBadRequest)
	return true
}
