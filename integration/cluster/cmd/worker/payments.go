package main

// The payments workloads (history.PaymentsWorkloads): each holder of the
// workload's Mutex charges orders at a payment API (cmd/payments) that
// cannot check a token, through an intent journal (package intent, on
// etcd, beside the lock):
//
//   - "PHASE use <g>": the grant; unless the workload skips it
//     (payments-nopending), Journal.Pending, and each intent an earlier
//     holder left open finished with Do and the same charge;
//   - then, until the hold elapses (one order at least): "PHASE inside
//     <g>" and a dwell (-dwell: where pause-use lands), the next order N
//     read from the state key (a plain read), and Do(ctx, held,
//     "charge/order-N", charge of N);
//   - "PHASE release <g>" and Unlock.
//
// The loop, the sessions, the acquires (Lock, or TryLock for -try's
// share) and the releases are runLocks'; payments.use is its use of a
// grant.
//
// The charge of N (Do's fn) claims the order, then calls the API: it moves
// the state key to N+1 (an idempotent max, in a Txn that commits only
// while the grant's key exists), prints "PHASE intent <g>" and dwells
// (-dwell: where kill-intent and pause-intent land: the intent written,
// the state advanced, no call made), posts the charge with the key
// (contrib/httpfence's Transport takes it from Do's ctx, with the token,
// which the API records and does not check; payments-nokeys sends
// neither), prints "PHASE call <g>" once the request is written to the
// connection (the API takes -delay to process it), and, once the reply is
// in, "PHASE outcome <g>" and dwells again (the call made, its outcome not
// recorded). A 409
// (the key's first request still processed) or any error leaves the
// intent open: the worker tries the order again (3 times at most, 100 to
// 300 ms apart) while its grant lasts, then releases; the next holder's
// Pending finishes it. A 422 records the order as failed.
//
// The worker does not check Done itself between orders: Do does (and its
// store's fence refuses a holder whose grant ended), which the planted
// bug unfenced-intent (DLOCK_PLANT) removes.
//
// With -reconcile, a worker takes one grant and does only the first step
// (Pending and its finishing, or nothing for payments-nopending): the
// run's final pass, a next holder after the last.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/contrib/httpfence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/cluster/history"
	"github.com/dlock-go/dlock/intent"
	"github.com/dlock-go/dlock/lock"
)

// payments is a payments worker's state.
type payments struct {
	w       *worker
	j       *intent.Journal
	api     *http.Client // keyed: httpfence's Transport; payments-nokeys: a plain one
	tr      *http.Transport
	keys    bool   // send the idempotency key (and the token)
	pending bool   // finish earlier holders' intents
	state   string // the state key: the next order to charge

	onSent atomic.Pointer[func()] // called once after the request's bytes are written to the connection
}

// sentConn is a connection to the API that reports each write once it is
// in the kernel (sent, or queued to be, even if the process dies next):
// the moment "PHASE call" marks. A trace's WroteRequest would come too
// early: net/http calls it before its transport flushes the request.
type sentConn struct {
	net.Conn
	sent func()
}

func (c *sentConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err == nil {
		c.sent()
	}
	return n, err
}

// paymentsState returns the state key of a payments workload's lock.
func paymentsState(lock string) string { return "payments/" + lock + "/next" }

// opPrefix is the prefix of an order's operation id: "charge/order-N".
const opPrefix = "charge/order-"

func newPayments(w *worker) *payments {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	dialer := &net.Dialer{Timeout: w.cfg.ttl}
	p := &payments{
		w:       w,
		j:       intent.New(intent.NewEtcd(w.cli, lock.DefaultPrefix)),
		tr:      tr,
		keys:    w.cfg.workload != history.PaymentsNoKeys,
		pending: w.cfg.workload != history.PaymentsNoPending,
		state:   paymentsState(w.cfg.lock),
	}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &sentConn{Conn: c, sent: func() {
			if f := p.onSent.Swap(nil); f != nil {
				(*f)()
			}
		}}, nil
	}
	// A request never outlives a TTL; the client without keys is what an
	// application that does not pass them uses.
	p.api = &http.Client{Timeout: w.cfg.ttl, Transport: tr}
	if p.keys {
		p.api = &http.Client{Timeout: w.cfg.ttl, Transport: &httpfence.Transport{Base: tr}}
	}
	return p
}

// close closes the API's idle connections.
func (p *payments) close() { p.tr.CloseIdleConnections() }

// use is the payments workloads' worker.use (runLocks calls it): it
// records grant g and prints "PHASE use", runs Pending (unless skipped)
// and finishes what it returns, then charges new orders until hold
// elapses (never, if hold < 0; none with -reconcile). It reports whether
// the grant was lost (Done closed) at the end, and when that was noticed.
func (p *payments) use(stop context.Context, g int, gr grant, mode, via string, lease, granted int64, hold time.Duration) (lost bool, noticed int64) {
	w := p.w
	h, ok := gr.(lock.Held)
	if !ok { // runLocks gives a Mutex's grant: never
		if w.err == nil {
			w.err = fmt.Errorf("payments: a %T is no lock.Held", gr)
		}
		return false, 0
	}
	w.grants++
	w.emit(history.Event{G: g, Kind: history.Grant, T: granted, Tok: h.Token().Seq, Mode: mode, Via: via, Lease: lease})
	w.phase("use", g)
	over := false
	if p.pending {
		ctx, cancel := context.WithTimeout(stop, 2*w.cfg.ttl)
		its, err := p.j.Pending(ctx, h)
		cancel()
		if err != nil {
			log.Printf("g%d: pending: %v", g, err)
			over = true
		}
		for _, it := range its {
			if over = p.do(stop, g, h, it.Op, true); over {
				break
			}
		}
	}
	end := time.Now().Add(hold)
	for n := 0; !over && !w.cfg.reconcile && stop.Err() == nil && (n == 0 || hold < 0 || time.Now().Before(end)); n++ {
		w.phase("inside", g)
		sleep(stop, w.cfg.dwell) // choosing the next order: where pause-use lands, before the read
		order, err := p.next(stop)
		if err != nil {
			log.Printf("g%d: read the next order: %v", g, err)
			break
		}
		over = p.do(stop, g, h, opPrefix+strconv.FormatInt(order, 10), false)
	}
	if isClosed(h.Done()) {
		return true, history.Now()
	}
	return false, 0
}

// do runs op through the journal, again while fn fails and the grant
// lasts (3 attempts at most). It reports whether the worker should end the
// grant: it was superseded or lost, or op is still open after its
// attempts.
func (p *payments) do(stop context.Context, g int, h lock.Held, op string, pending bool) (over bool) {
	order, err := strconv.ParseInt(strings.TrimPrefix(op, opPrefix), 10, 64)
	if !strings.HasPrefix(op, opPrefix) || err != nil {
		log.Printf("g%d: %q is no order's operation: left open", g, op)
		return false
	}
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(stop, 2*p.w.cfg.ttl)
		ev := history.Event{G: g, Kind: history.Do, Tok: h.Token().Seq, Op: op, Pending: pending, Result: "error"}
		ev.Call = history.Now()
		ev.T = ev.Call
		err := p.j.Do(ctx, h, op, func(ctx context.Context, key string) error {
			ev.Key = key
			return p.charge(ctx, g, h, order)
		})
		cancel()
		ev.Ret = history.Now()
		ev.Err = errString(err)
		switch {
		case err == nil:
			ev.Result = "ok"
		case errors.Is(err, intent.ErrFailed):
			ev.Result = "failed"
		case errors.Is(err, intent.ErrSuperseded):
			ev.Result = "superseded"
		case errors.Is(err, lock.ErrLockLost) || isClosed(h.Done()):
			ev.Result = "ended"
		}
		p.w.emit(ev)
		switch {
		case ev.Result == "ok" || ev.Result == "failed":
			return false
		case ev.Result != "error" || stop.Err() != nil || attempt == 3:
			if ev.Result == "error" {
				log.Printf("g%d: %s: %v", g, op, err)
			}
			return true
		}
		if !sleep(stop, p.w.between(100*time.Millisecond, 300*time.Millisecond)) {
			return true
		}
	}
}

// next reads the next order to charge: the state key (1 before the first).
func (p *payments) next(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*p.w.cfg.ttl)
	defer cancel()
	n, _, err := p.read(ctx)
	return n, err
}

// read returns the state and its mod revision (0: no key yet; the state
// is then 1).
func (p *payments) read(ctx context.Context) (int64, int64, error) {
	resp, err := p.w.cli.Get(ctx, p.state)
	if err != nil {
		return 0, 0, err
	}
	if len(resp.Kvs) == 0 {
		return 1, 0, nil
	}
	n, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %q: %w", p.state, resp.Kvs[0].Value, err)
	}
	return n, resp.Kvs[0].ModRevision, nil
}

// advance moves the state to at least next: an idempotent max, written in
// a Txn that commits only while h's key exists (and the state is as read).
func (p *payments) advance(ctx context.Context, h lock.Held, next int64) error {
	owner, ok := h.(interface{ IsOwner() clientv3.Cmp })
	if !ok {
		return fmt.Errorf("advance: a %T has no IsOwner", h)
	}
	for {
		cur, rev, err := p.read(ctx)
		if err != nil {
			return fmt.Errorf("advance: %w", err)
		}
		if cur >= next {
			return nil
		}
		resp, err := p.w.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(p.state), "=", rev), owner.IsOwner()).
			Then(clientv3.OpPut(p.state, fmt.Sprintf("%020d", next))).
			Else(clientv3.OpTxn([]clientv3.Cmp{owner.IsOwner()}, nil, nil)).
			Commit()
		switch {
		case err != nil:
			return fmt.Errorf("advance: %w", err)
		case resp.Succeeded:
			return nil
		case !resp.Responses[0].GetResponseTxn().Succeeded:
			return fmt.Errorf("advance: %w: the grant's key is gone", lock.ErrLockLost)
		}
		// The state moved since it was read: read it again.
	}
}

// errInFlight is a 409: the key's first request is still processed.
var errInFlight = errors.New("payments: the key's first request is still processed (409)")

// charge is Do's fn for order: the claim (the state past the order), then
// the call, with the key and the token in ctx (Do put the key there).
func (p *payments) charge(ctx context.Context, g int, h lock.Held, order int64) error {
	w := p.w
	if err := p.advance(ctx, h, order+1); err != nil {
		return err
	}
	w.phase("intent", g)
	sleep(ctx, w.cfg.dwell) // the request being made: the intent written, the state advanced, no call
	body, err := json.Marshal(map[string]int64{"order": order, "amount": amount(order)})
	if err != nil {
		return intent.Failed(err)
	}
	key, _ := intent.KeyFromContext(ctx)
	if p.keys {
		ctx = fence.NewContext(ctx, h.Token()) // the Transport sends both
	} else {
		key = "" // a plain client: neither is sent
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.payments+"/charge", strings.NewReader(string(body)))
	if err != nil {
		return intent.Failed(err)
	}
	req.Header.Set("Content-Type", "application/json")
	ev := history.Event{G: g, Kind: history.Pay, Tok: h.Token().Seq, Op: opPrefix + strconv.FormatInt(order, 10), Key: key, Result: "error"}
	ev.Call = history.Now()
	ev.T = ev.Call
	sent := func() { w.phase("call", g) }
	p.onSent.Store(&sent)
	resp, err := p.api.Do(req)
	p.onSent.Store(nil)
	if err != nil {
		ev.Err = err.Error()
		w.emit(ev)
		return err
	}
	resp.Body.Close()
	ev.Ret = history.Now()
	ev.Value = int64(resp.StatusCode)
	switch resp.StatusCode {
	case http.StatusCreated, http.StatusOK:
		ev.Result = "ok"
		w.emit(ev)
		w.phase("outcome", g)
		sleep(ctx, w.cfg.dwell) // the reply read, the outcome not yet recorded
		return nil
	case http.StatusConflict:
		w.emit(ev)
		return errInFlight
	case http.StatusUnprocessableEntity:
		w.emit(ev)
		return intent.Failed(fmt.Errorf("payments: order %d: the key was used for another payload (422)", order))
	}
	ev.Err = resp.Status
	w.emit(ev)
	return fmt.Errorf("payments: order %d: %s", order, resp.Status)
}

// amount is order's amount in cents: the same for every attempt, so that
// a retry's payload is the first request's.
func amount(order int64) int64 { return 100 + order%900 }
