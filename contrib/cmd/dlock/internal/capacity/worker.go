package capacity

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/dlock-go/dlock"
)

// IsWorker reports whether this process was started as a capacity worker
// (WorkerEnv is set). The dlock binary checks it first thing in main, and
// a test binary in TestMain, before anything else runs.
func IsWorker() bool { return os.Getenv(WorkerEnv) == "1" }

// WorkerMain runs this process as a capacity worker on stdin and stdout
// and returns its exit code.
func WorkerMain() int {
	raiseNoFile()
	w := &worker{enc: json.NewEncoder(os.Stdout)}
	err := w.serve(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "capacity worker:", err)
		return 1
	}
	return 0
}

// lockTimeout bounds every Lock a worker makes: a scenario that cannot
// finish fails instead of hanging.
const lockTimeout = 5 * time.Minute

type worker struct {
	encMu sync.Mutex
	enc   *json.Encoder

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	clis     []*clientv3.Client
	sessions []sess
	holds    []held
	single   held
	queued   atomic.Int64
	marks    []int64 // each session's renewed() at the last mark
}

func (w *worker) serve(in io.Reader) error {
	w.ctx, w.cancel = context.WithCancel(context.Background())
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		var c command
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return fmt.Errorf("bad command: %w", err)
		}
		w.wg.Go(func() {
			r, err := w.do(w.ctx, c)
			r.ID = c.ID
			if err != nil {
				r.Err = fmt.Sprintf("%s: %v", c.Op, err)
			}
			w.encMu.Lock()
			_ = w.enc.Encode(r)
			w.encMu.Unlock()
		})
	}
	w.cancel()
	w.wg.Wait()
	w.closeAll()
	return sc.Err()
}

func (w *worker) closeAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	parallel(len(w.sessions), 32, func(i int) { _ = w.sessions[i].close(ctx) })
	for _, c := range w.clis {
		_ = c.Close()
	}
}

// parallel runs f(0..n-1) on at most width goroutines.
func parallel(n, width int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, width) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(i)
			}
		})
	}
	wg.Wait()
}

// parallelErr is parallel that returns the first error.
func parallelErr(n, width int, f func(i int) error) error {
	var mu sync.Mutex
	var first error
	parallel(n, width, func(i int) {
		if err := f(i); err != nil {
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
		}
	})
	return first
}

func (w *worker) session(i int) sess {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sessions[i%len(w.sessions)]
}

func (w *worker) nsessions() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.sessions)
}

func (w *worker) do(ctx context.Context, c command) (reply, error) {
	if c.Op != opOpen && w.nsessions() == 0 {
		return reply{}, errors.New("no sessions open")
	}
	switch c.Op {
	case opOpen:
		return reply{}, w.open(ctx, c)
	case opHold:
		n := w.nsessions()
		hs := make([]held, n*c.K)
		err := parallelErr(n*c.K, 64, func(i int) error {
			s, j := i/c.K, i%c.K
			lctx, cancel := context.WithTimeout(ctx, lockTimeout)
			defer cancel()
			h, err := w.session(s).lock(lctx, fmt.Sprintf("%s/%d/%d", c.Prefix, c.Base+s, j), c.Watch)
			hs[i] = h
			return err
		})
		w.mu.Lock()
		for _, h := range hs {
			if h != nil {
				w.holds = append(w.holds, h)
			}
		}
		w.mu.Unlock()
		return reply{}, err
	case opLoop:
		return w.loop(ctx, c)
	case opLockUnlock:
		var lat []float64
		for i := range c.K {
			start := time.Now()
			if err := w.lockUnlock(ctx, w.session(0), fmt.Sprintf("%s/%d", c.Prefix, i)); err != nil {
				return reply{}, err
			}
			lat = append(lat, ms(time.Since(start)))
		}
		return reply{Lat: lat}, nil
	case opHoldOne:
		lctx, cancel := context.WithTimeout(ctx, lockTimeout)
		defer cancel()
		h, err := w.session(0).lock(lctx, c.Name, true)
		if err != nil {
			return reply{}, err
		}
		w.mu.Lock()
		w.single = h
		w.mu.Unlock()
		return reply{}, nil
	case opRelease:
		w.mu.Lock()
		h := w.single
		w.single = nil
		w.mu.Unlock()
		if h == nil {
			return reply{}, errors.New("nothing held")
		}
		now := time.Now().UnixNano()
		return reply{LastNS: now}, h.unlock(ctx)
	case opWait:
		return w.wait(ctx, c)
	case opWaitMany:
		evs := make([]event, w.nsessions())
		err := parallelErr(len(evs), len(evs), func(s int) error {
			lctx, cancel := context.WithTimeout(ctx, lockTimeout)
			defer cancel()
			h, err := w.session(s).lock(lctx, fmt.Sprintf("%s/%d/0", c.Prefix, c.Base+s), true)
			if err != nil {
				return err
			}
			evs[s].Grant = time.Now().UnixNano()
			w.mu.Lock()
			w.holds = append(w.holds, h)
			w.mu.Unlock()
			return nil
		})
		return reply{Events: evs}, err
	case opQueued:
		return reply{Count: int(w.queued.Load())}, nil
	case opMark:
		w.mu.Lock()
		w.marks = make([]int64, len(w.sessions))
		for i, s := range w.sessions {
			w.marks[i] = s.renewed()
		}
		w.mu.Unlock()
		return reply{}, nil
	case opRenewed:
		return w.renewed(ctx, c)
	case opProbe:
		return w.probe(ctx, c)
	case opLost:
		return reply{Lost: w.lost()}, nil
	}
	return reply{}, fmt.Errorf("unknown op %q", c.Op)
}

func (w *worker) lost() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.sessions {
		select {
		case <-s.done():
			n++
		default:
		}
	}
	return n
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (w *worker) lockUnlock(ctx context.Context, s sess, name string) error {
	lctx, cancel := context.WithTimeout(ctx, lockTimeout)
	defer cancel()
	h, err := s.lock(lctx, name, false)
	if err != nil {
		return err
	}
	return h.unlock(lctx)
}

// open dials c.Clients etcd clients and starts c.Sessions sessions on
// them, round robin.
func (w *worker) open(ctx context.Context, c command) error {
	cfg, err := dlock.ParseDSN(c.DSN)
	if err != nil {
		return err
	}
	clis := make([]*clientv3.Client, max(c.Clients, 1))
	for i := range clis {
		if clis[i], err = clientv3.New(EtcdConfig(cfg)); err != nil {
			for _, cl := range clis[:i] {
				cl.Close()
			}
			return fmt.Errorf("etcd client: %w", err)
		}
	}
	ss := make([]sess, c.Sessions)
	ttl := time.Duration(c.TTLMillis) * time.Millisecond
	err = parallelErr(c.Sessions, 32, func(i int) error {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		s, err := newSess(sctx, c.Impl, clis[i%len(clis)], c.Root, ttl, func() { w.queued.Add(1) })
		ss[i] = s
		return err
	})
	w.mu.Lock()
	w.clis = append(w.clis, clis...)
	for _, s := range ss {
		if s != nil {
			w.sessions = append(w.sessions, s)
		}
	}
	w.mu.Unlock()
	return err
}

// loop runs c.Slots concurrent loops of Lock→Unlock, each on a name of its
// own, for c.DurMillis, and returns the grants and acquire latencies.
func (w *worker) loop(ctx context.Context, c command) (reply, error) {
	dur := time.Duration(c.DurMillis) * time.Millisecond
	end := time.Now().Add(dur)
	var mu sync.Mutex
	smp := newSample(20000)
	var count atomic.Int64
	err := parallelErr(c.Slots, c.Slots, func(i int) error {
		s := w.session(i)
		name := fmt.Sprintf("%s/%d", c.Prefix, c.Base+i)
		for time.Now().Before(end) {
			lctx, cancel := context.WithTimeout(ctx, lockTimeout)
			start := time.Now()
			h, err := s.lock(lctx, name, false)
			if err != nil {
				cancel()
				return err
			}
			d := time.Since(start)
			err = h.unlock(lctx)
			cancel()
			if err != nil {
				return err
			}
			count.Add(1)
			mu.Lock()
			smp.add(ms(d))
			mu.Unlock()
		}
		return nil
	})
	return reply{Count: int(count.Load()), Lat: smp.vals}, err
}

// wait runs c.K waiters on c.Name, spread over the sessions: each takes
// the lock, records its grant and releases it at once.
func (w *worker) wait(ctx context.Context, c command) (reply, error) {
	evs := make([]event, c.K)
	err := parallelErr(c.K, c.K, func(i int) error {
		lctx, cancel := context.WithTimeout(ctx, lockTimeout)
		defer cancel()
		h, err := w.session(c.Skip+i).lock(lctx, c.Name, false)
		if err != nil {
			return err
		}
		g := time.Now().UnixNano()
		rev, err := h.rev(lctx)
		if err != nil {
			return err
		}
		u := time.Now().UnixNano()
		evs[i] = event{Grant: g, Unlock: u, Rev: rev}
		return h.unlock(lctx)
	})
	return reply{Events: evs}, err
}

// renewed waits until every live session has had a keepalive acknowledged
// since the last mark, or has ended, and returns when the last one
// was seen (LastNS) and how many ended (Lost).
func (w *worker) renewed(ctx context.Context, c command) (reply, error) {
	w.mu.Lock()
	ss := append([]sess(nil), w.sessions...)
	base := w.marks
	w.mu.Unlock()
	if len(base) != len(ss) {
		return reply{}, errors.New("renewed before mark")
	}
	seen := make([]bool, len(ss))
	left := len(ss)
	var last int64
	lost := 0
	deadline := time.Now().Add(time.Duration(c.DurMillis) * time.Millisecond)
	t := time.NewTicker(10 * time.Millisecond) // no notification of a renewal: poll
	defer t.Stop()
	for left > 0 {
		now := time.Now().UnixNano()
		for i, s := range ss {
			if seen[i] {
				continue
			}
			select {
			case <-s.done():
				seen[i], left = true, left-1
				lost++
				continue
			default:
			}
			if s.renewed() != base[i] {
				seen[i], left, last = true, left-1, now
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return reply{LastNS: last, Lost: lost}, fmt.Errorf("%d of %d sessions not renewed within %v", left, len(ss), time.Duration(c.DurMillis)*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return reply{}, ctx.Err()
		case <-t.C:
		}
	}
	return reply{LastNS: last, Lost: lost}, nil
}

// EtcdConfig is the etcd client configuration for cfg (from a dlock DSN):
// its endpoints, TLS and credentials, as dlock.Open would dial them.
func EtcdConfig(cfg dlock.Config) clientv3.Config {
	ec := clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		Username:    cfg.Username,
		Password:    cfg.Password,
		TLS:         cfg.TLS,
		Logger:      zap.NewNop(),
	}
	if ec.DialTimeout == 0 {
		ec.DialTimeout = 5 * time.Second
	}
	if cfg.TLS != nil && cfg.TLS.ServerName != "" {
		ec.DialOptions = append(ec.DialOptions, grpc.WithAuthority(cfg.TLS.ServerName))
	}
	return ec
}

// probe takes c.Name on session 0 as soon as the cluster grants it,
// trying again (as a user would) while a failover makes Lock fail: the
// concurrency package and the limit do not ride out a leader election.
func (w *worker) probe(ctx context.Context, c command) (reply, error) {
	ctx, cancel := context.WithTimeout(ctx, lockTimeout)
	defer cancel()
	var last error
	for {
		actx, acancel := context.WithTimeout(ctx, 500*time.Millisecond) // short: a try stuck on the dead leader is retried
		h, err := w.session(0).lock(actx, c.Name, false)
		acancel()
		if err == nil {
			g := time.Now().UnixNano()
			return reply{GrantNS: g}, h.unlock(ctx)
		}
		last = err
		select {
		case <-ctx.Done():
			return reply{}, fmt.Errorf("no grant: %w (last error: %v)", ctx.Err(), last)
		case <-time.After(20 * time.Millisecond): // retry pace
		}
	}
}
