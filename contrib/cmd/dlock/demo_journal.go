package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/proxy"

	"github.com/dlock-go/dlock/intent"
	"github.com/dlock-go/dlock/lock"
)

// journal is the second act: the same pause, at a resource that cannot
// check a token: a payment API that deduplicates by Idempotency-Key. A
// charges an invoice through intent.Journal.Do and pauses before Do
// records the outcome; B, granted the lock next, charges again. Two copies
// of the API show the two ways: without a key and the journal (the invoice
// is charged twice), and with them (once). cliA reaches etcd through p.
func (d *demo) journal(ctx context.Context, p proxy.Server, cliA, cliB *clientv3.Client) (err error) {
	const (
		name    = "invoice-43"
		op      = "charge/invoice-43"
		nextOp  = "charge/invoice-44"
		invoice = "invoice-43"
	)
	fmt.Fprintf(d.out, "\nNow a resource that cannot check a token: a payment API. It deduplicates by\nIdempotency-Key instead; the intent journal (package intent) supplies the key.\n\n")

	// Two copies of the API: "today" is called the way teams often do it
	// (no key; the invoice is marked paid after the call), "keyed" through
	// the journal, with its key.
	today, err := startPayments("today")
	if err != nil {
		return err
	}
	defer today.close()
	keyed, err := startPayments("keyed")
	if err != nil {
		return err
	}
	defer keyed.close()
	orders := &store{v: map[string]string{invoice: "unpaid"}} // today's "marked paid" record
	d.say("", "starting a payment API, two copies, on loopback (no tokens; deduplicates by Idempotency-Key)")

	lockA, lockB, done, err := holders(ctx, cliA, cliB, name)
	if err != nil {
		return err
	}
	defer done()
	// Each client's journal is on its own etcd client: A's through the
	// proxy, so that A's pause cuts it off too.
	jA := intent.New(intent.NewEtcd(cliA, lock.DefaultPrefix))
	jB := intent.New(intent.NewEtcd(cliB, lock.DefaultPrefix))

	// 1. A is granted the lock.
	heldA, err := lockA.Lock(ctx)
	if err != nil {
		return err
	}
	tokA := heldA.Token()
	d.say("A", "is granted lock %q with fencing token %d (session TTL %v)", name, tokA.Seq, demoTTL)
	bGranted := lockAsync(ctx, lockB)
	d.say("B", "asks for the same lock and waits in line")

	// 2. A charges the invoice through the journal, on both copies of the
	// API, then pauses inside fn: after the calls, before Do records them.
	var (
		keyA             string
		chToday, chKeyed charge
		charged          = make(chan struct{})
		resume           = make(chan struct{})
		resumeA          = sync.OnceFunc(func() { close(resume) })
		doneA            = make(chan error, 1)
		wg               sync.WaitGroup
	)
	defer wg.Wait()
	defer func() { // on an early return too, A must not stay paused
		p.UnpauseTx()
		p.UnpauseRx()
		resumeA()
	}()
	wg.Go(func() {
		doneA <- jA.Do(ctx, heldA, op, func(ctx context.Context, key string) error {
			var err error
			if chToday, _, err = today.charge(ctx, invoice, ""); err != nil {
				return err
			}
			if chKeyed, _, err = keyed.charge(ctx, invoice, key); err != nil {
				return err
			}
			keyA = key
			close(charged)
			select { // A is paused here
			case <-resume:
			case <-ctx.Done():
			}
			return nil
		})
	})
	select {
	case <-charged:
	case err := <-doneA:
		return fmt.Errorf("demo: A's charge: %w", err)
	case <-ctx.Done():
		return fmt.Errorf("demo: A's charge: %w", ctx.Err())
	}
	d.say("A", "j.Do(%q): the journal records the intent, key %s, token %d", op, keyA, tokA.Seq)
	d.say("A", "  charges without a key (the way it is often done today): %s", chToday.ID)
	d.say("A", "  charges with Idempotency-Key: %s: %s", keyA, chKeyed.ID)

	// 3. A pauses before it marks the invoice paid and before Do records
	// the outcome. Its traffic is held, not dropped (act 1 drops it): A
	// uses its connection again after the pause, and a paused process
	// loses none of its bytes; a dropped chunk would break the HTTP/2
	// stream under A's next call.
	p.PauseTx()
	p.PauseRx()
	d.say("A", "PAUSES right after the calls, before it records them: no heartbeats")
	<-heldA.Done()
	d.say("A", "session's local deadline passes; A, paused, cannot look")

	// 4. B is granted the lock.
	heldB, err := awaitGrant(ctx, bGranted)
	if err != nil {
		return err
	}
	tokB := heldB.Token()
	d.say("etcd", "A's lease expires: etcd deletes A's key")
	d.say("B", "is granted the lock with token %d (> %d)", tokB.Seq, tokA.Seq)

	// 5. B, today's way: the invoice is not marked paid, so it charges.
	state := orders.read(invoice)
	c, _, err := today.charge(ctx, invoice, "")
	if err != nil {
		return err
	}
	orders.write(invoice, "paid")
	d.say("B", "without the journal: invoice %q is %q, so B charges it (no key): %s", invoice, state, c.ID)

	// 6. B, the journal's way: it finishes what A left open, with A's key.
	open, err := jB.Pending(ctx, heldB)
	if err != nil {
		return fmt.Errorf("demo: B's Pending: %w", err)
	}
	if len(open) != 1 || open[0].Op != op {
		return fmt.Errorf("demo: B's Pending: want A's intent %q, got %v", op, open)
	}
	it := open[0]
	d.say("B", "with the journal: j.Pending lists A's open intent: op %q, key %s, A's token %d", it.Op, it.Key, it.Token.Seq)
	var replayed bool
	if err := jB.Do(ctx, heldB, it.Op, func(ctx context.Context, key string) error {
		var err error
		c, replayed, err = keyed.charge(ctx, invoice, key)
		return err
	}); err != nil {
		return fmt.Errorf("demo: B's charge: %w", err)
	}
	if !replayed {
		return fmt.Errorf("demo: the API charged %q again (%s) instead of replaying %s", invoice, c.ID, chKeyed.ID)
	}
	d.say("B", "  j.Do(%q) calls with the same key; the API replays A's %s: no new charge", it.Op, c.ID)
	nToday, nKeyed := today.count(invoice), keyed.count(invoice)
	d.say("", "charges for %q: without the journal %d, with the journal and keys %d", invoice, nToday, nKeyed)
	if nToday != 2 || nKeyed != 1 {
		return fmt.Errorf("demo: charges for %q: want 2 without the journal and 1 with it, got %d and %d", invoice, nToday, nKeyed)
	}
	if err := heldB.Unlock(ctx); err != nil {
		return fmt.Errorf("demo: B: %w", err)
	}
	d.say("B", "is done and releases the lock")

	// 7. A resumes: its Do cannot record the outcome, and A can start
	// nothing new.
	p.UnpauseTx()
	p.UnpauseRx()
	resumeA()
	d.say("A", "RESUMES and its j.Do tries to record the outcome:")
	var errA error
	select {
	case errA = <-doneA:
	case <-ctx.Done():
		return fmt.Errorf("demo: A's j.Do did not return: %w", ctx.Err())
	}
	if !errors.Is(errA, intent.ErrSuperseded) {
		return fmt.Errorf("demo: A's j.Do after B's Pending: want an error matching intent.ErrSuperseded, got %v", errA)
	}
	d.say("", "       REFUSED: %v", errA)
	called := false
	errNext := jA.Do(ctx, heldA, nextOp, func(context.Context, string) error { called = true; return nil })
	if errNext == nil || called {
		return fmt.Errorf("demo: A's j.Do(%q) was not refused (fn called: %v, error: %v)", nextOp, called, errNext)
	}
	d.say("A", "tries j.Do(%q): REFUSED, the API not called: %v", nextOp, errNext)

	fmt.Fprintf(d.out, `
Result for %q (one payment due):
  without the journal:       %d charges  <- DOUBLE CHARGE: A's and B's
  with the journal and keys: %d charge   <- correct: B finished A's intent with A's key

The API cannot check a token but deduplicates: the journal gave B A's key.
Residual risk: a pause between intent and call past the key window (24 h at Stripe).
`, invoice, nToday, nKeyed)
	return nil
}

// grantResult is what lockAsync delivers.
type grantResult struct {
	h   lock.Held
	err error
}

// lockAsync starts l.Lock(ctx) in a goroutine and delivers its result.
// The goroutine ends when Lock returns: granted, or ctx or l's session
// ended.
func lockAsync(ctx context.Context, l *lock.Mutex) <-chan grantResult {
	ch := make(chan grantResult, 1)
	go func() {
		h, err := l.Lock(ctx)
		ch <- grantResult{h, err}
	}()
	return ch
}

// awaitGrant waits for lockAsync's result.
func awaitGrant(ctx context.Context, ch <-chan grantResult) (lock.Held, error) {
	select {
	case g := <-ch:
		if g.err != nil {
			return nil, fmt.Errorf("demo: B: %w", g.err)
		}
		return g.h, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("demo: B was not granted the lock: %w", ctx.Err())
	}
}
