package env

// The payments workloads (history.PaymentsWorkloads; docs/faults.md, "The
// payments workload"): each has a payment API of its own (cmd/payments) in
// the resource's namespace, and leaves by design what the run reads and
// then removes at its end (SettlePayments): the intent journals and the
// state keys in etcd.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/integration/cluster/history"
)

// PaymentsServer is a payments workload's payment API.
type PaymentsServer struct {
	Workload string
	Window   time.Duration // how long it keeps a key's reply
	URL      string
	Proc     *Proc
}

// PaymentsDir is where a run's payments artifacts are, under its Dir:
// "<workload>.audit.jsonl" (each API's charges, history.Charge) and
// "etcd.jsonl" (the keyspace's history, history.KV, read by
// SettlePayments).
const PaymentsDir = "payments"

// HasPayments tells whether the run has a payments workload.
func (c Config) HasPayments() bool {
	for _, wl := range c.Workloads {
		if history.IsPayments(wl) {
			return true
		}
	}
	return false
}

// paymentsWindow is the window of wl's API: PaymentsWindow for
// payments-short, 24 h (Stripe's) for the others.
func (c Config) paymentsWindow(wl string) time.Duration {
	if wl == history.PaymentsShort {
		return c.PaymentsWindow
	}
	return 24 * time.Hour
}

// startPayments starts the payment API of each payments workload in the
// resource's namespace, and waits until each answers.
func (h *Harness) startPayments(ctx context.Context) error {
	for i, wl := range h.Cfg.Workloads {
		if !history.IsPayments(wl) {
			continue
		}
		addr := fmt.Sprintf("%s:%d", h.ResHost.IP, 8081+i)
		s := &PaymentsServer{Workload: wl, Window: h.Cfg.paymentsWindow(wl), URL: "http://" + addr}
		var err error
		s.Proc, err = StartProc(h.ResHost, wl, filepath.Join(h.Dir, "logs", wl+".log"), nil, nil,
			h.bins.payments, "-listen", addr, "-audit", filepath.Join(h.Dir, PaymentsDir, wl+".audit.jsonl"),
			"-window", s.Window.String(), "-delay", h.Cfg.PaymentsDelay.String())
		if err != nil {
			return err
		}
		if !h.track(s.Proc) {
			return errors.New("cluster: harness closed")
		}
		h.mu.Lock()
		h.payments = append(h.payments, s)
		h.mu.Unlock()
		if err := waitHTTP(ctx, s.URL+"/healthz"); err != nil {
			return fmt.Errorf("%s: %w", wl, err)
		}
	}
	return nil
}

// Payments returns the payments workloads' APIs.
func (h *Harness) Payments() []*PaymentsServer {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*PaymentsServer(nil), h.payments...)
}

// paymentsURL returns wl's API ("" if it has none).
func (h *Harness) paymentsURL(wl string) string {
	for _, s := range h.Payments() {
		if s.Workload == wl {
			return s.URL
		}
	}
	return ""
}

// SettlePayments ends the payments workloads once their workers have
// stopped: each workload's final pass (a worker with -reconcile: one
// grant, and the intents earlier holders left open finished, as the next
// holder would; payments-nopending's skips that, as its holders do); the
// APIs stopped (their audits closed); the keyspace's history from
// revision 1 written to PaymentsDir/etcd.jsonl; then the journals and the
// state keys deleted, so that the run leaves nothing. wait bounds each
// pass.
func (h *Harness) SettlePayments(ctx context.Context, wait time.Duration) error {
	var errs []error
	for _, s := range h.Payments() {
		if err := h.reconcile(ctx, s.Workload, wait); err != nil {
			errs = append(errs, fmt.Errorf("%s: final pass: %w", s.Workload, err))
		}
	}
	for _, s := range h.Payments() {
		if err := s.Proc.Stop(5*time.Second + h.Cfg.PaymentsDelay); err != nil {
			errs = append(errs, fmt.Errorf("%s: API: %w", s.Workload, err))
		}
	}
	cli, err := h.Etcd.Client()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer cli.Close()
	if err := dumpEtcd(ctx, cli, filepath.Join(h.Dir, PaymentsDir, "etcd.jsonl")); err != nil {
		errs = append(errs, fmt.Errorf("etcd's history: %w", err))
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The journals beside the locks (intent.Etcd under "dlock/lock"),
	// the journal-wide list of finished records (only these workloads
	// keep journals here), and the state keys (cmd/worker's payments.go).
	prefixes := []string{"dlock/lock/!intent-done/"}
	for _, s := range h.Payments() {
		prefixes = append(prefixes, "dlock/lock/dlock-"+s.Workload+"!intent/", "payments/dlock-"+s.Workload+"/")
	}
	for _, p := range prefixes {
		if _, err := cli.Delete(dctx, p, clientv3.WithPrefix()); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// reconcile runs wl's final pass and waits (up to wait) for its exit.
func (h *Harness) reconcile(ctx context.Context, wl string, wait time.Duration) error {
	var eps []string
	for _, m := range h.Etcd.Members {
		eps = append(eps, m.Endpoint())
	}
	m := h.Etcd.Members[0]
	w, err := h.launch(wl, 0, 0, m, m.Host, "-endpoints", strings.Join(eps, ","), "-reconcile")
	if err != nil {
		return err
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.Proc.Done():
		return w.Proc.Err()
	case <-t.C:
	case <-ctx.Done():
	}
	w.Proc.Kill()
	return fmt.Errorf("w%d did not finish within %v", w.ID, wait)
}

// endKey is the sentinel whose put ends the history dumpEtcd reads.
const endKey = "payments/end"

// dumpEtcd writes the keyspace's history, every event from revision 1 to
// now (a sentinel put, then deleted), to path, one history.KV a line. It
// fails if the store was compacted.
func dumpEtcd(ctx context.Context, cli *clientv3.Client, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	put, err := cli.Put(ctx, endKey, "")
	if err != nil {
		return err
	}
	end := put.Header.Revision
	out, err := history.Create(path)
	if err != nil {
		return err
	}
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	err = func() error {
		for resp := range cli.Watch(wctx, "", clientv3.WithPrefix(), clientv3.WithRev(1)) {
			if err := resp.Err(); err != nil {
				return err
			}
			for _, ev := range resp.Events {
				kv := history.KV{Rev: ev.Kv.ModRevision, Key: string(ev.Kv.Key)}
				if ev.Type == clientv3.EventTypeDelete {
					kv.Del = true
				} else {
					kv.Value, kv.Create, kv.Lease = string(ev.Kv.Value), ev.Kv.CreateRevision, ev.Kv.Lease
				}
				if kv.Rev == end {
					return nil
				}
				if err := out.Write(kv); err != nil {
					return err
				}
			}
		}
		return cmp.Or(ctx.Err(), errors.New("the watch ended"))
	}()
	if e := out.Close(); err == nil {
		err = e
	}
	if _, e := cli.Delete(ctx, endKey); err == nil {
		err = e
	}
	return err
}
