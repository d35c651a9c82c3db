package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

const demoDescription = `
Starts etcd inside this process and replays, live, the failure that fencing
tokens exist for: client A holds a lock, pauses (a GC pause, SIGSTOP, a
migrated VM) past its session timeout, client B is granted the lock, and A
wakes up and writes anyway, believing it still holds the lock.

A writes to two copies of a resource: one that trusts the lock (the write
lands and destroys B's), and one fenced by the lock's token (the write is
rejected).

Then the same pause at a resource that cannot check a token: a payment API
that deduplicates by Idempotency-Key. A pauses after charging an invoice
and before recording it; B charges again. Without the intent journal the
invoice is charged twice; with it (package intent), B finishes A's intent
with A's key and the API charges once. Takes a few seconds; needs nothing
but Go.`

// demoTTL is A's session TTL: short, so the demo is quick.
const demoTTL = 2 * time.Second

// demoTimeout bounds the whole demo.
const demoTimeout = 60 * time.Second

func runDemo(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "demo", "", demoDescription)
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()
	d := &demo{out: e.stdout, start: time.Now()}
	return d.run(ctx)
}

type demo struct {
	out   io.Writer
	start time.Time
}

// say prints one narrated step, stamped with the time since the start.
func (d *demo) say(who, format string, args ...any) {
	fmt.Fprintf(d.out, "%5.1fs  %-4s %s\n", time.Since(d.start).Seconds(), who, fmt.Sprintf(format, args...))
}

// store is the protected resource: one value per key, in memory. The
// unfenced copy trusts whoever calls write; the fenced copy admits a write
// only through its guard.
type store struct {
	mu sync.Mutex
	v  map[string]string
}

func (s *store) write(k, v string) { s.mu.Lock(); s.v[k] = v; s.mu.Unlock() }
func (s *store) read(k string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.v[k]
}

// run starts etcd and a proxy in front of it for A, then plays the two
// acts: a stale write at a fenced and an unfenced resource, then a stale
// payment with and without the intent journal.
func (d *demo) run(ctx context.Context) error {
	d.say("", "starting etcd (embedded, one member, on loopback)…")
	etcd, err := startEtcd(ctx)
	if err != nil {
		return err
	}
	defer etcd.close()

	// A reaches etcd through a proxy that can drop its traffic: that is how
	// the demo pauses A's heartbeats without pausing this whole process
	// (etcd runs in it too).
	p, proxyAddr, err := startProxy(etcd.addr)
	if err != nil {
		return err
	}
	defer p.Close()
	cliA, err := demoClient(ctx, proxyAddr)
	if err != nil {
		return err
	}
	defer cliA.Close()
	cliB, err := demoClient(ctx, etcd.addr)
	if err != nil {
		return err
	}
	defer cliB.Close()

	if err := d.fencedWrite(ctx, p, cliA, cliB); err != nil {
		return err
	}
	return d.journal(ctx, p, cliA, cliB)
}

// holders starts A's session (TTL demoTTL, through cliA) and B's, and
// returns A's and B's Mutex of name; done closes the sessions.
func holders(ctx context.Context, cliA, cliB *clientv3.Client, name string) (lockA, lockB *lock.Mutex, done func(), err error) {
	sessA, err := session.New(ctx, cliA, session.WithTTL(demoTTL))
	if err != nil {
		return nil, nil, nil, err
	}
	sessB, err := session.New(ctx, cliB)
	if err != nil {
		closeQuietly(sessA)
		return nil, nil, nil, err
	}
	done = func() { closeQuietly(sessB); closeQuietly(sessA) }
	if lockA, err = lock.New(sessA, name, lock.WithOwner("A")); err == nil {
		lockB, err = lock.New(sessB, name, lock.WithOwner("B"))
	}
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	return lockA, lockB, done, nil
}

// fencedWrite is the first act: A, paused past its session, writes to a
// resource that trusts the lock and to one fenced by the lock's token.
// cliA reaches etcd through p.
func (d *demo) fencedWrite(ctx context.Context, p proxy.Server, cliA, cliB *clientv3.Client) error {
	const name = "invoice-42"
	lockA, lockB, done, err := holders(ctx, cliA, cliB, name)
	if err != nil {
		return err
	}
	defer done()

	plain := &store{v: map[string]string{name: "draft"}}
	fenced := &store{v: map[string]string{name: "draft"}}
	guard := fence.NewMemoryGuard()

	// 1. A is granted the lock.
	heldA, err := lockA.Lock(ctx)
	if err != nil {
		return err
	}
	tokA := heldA.Token()
	d.say("A", "is granted lock %q with fencing token %d (session TTL %v)", name, tokA.Seq, demoTTL)
	d.say("A", "reads the invoice and starts computing its update…")

	// B queues behind A.
	bGranted := lockAsync(ctx, lockB)
	d.say("B", "asks for the same lock and waits in line")

	// 2. A pauses: its heartbeats stop reaching etcd.
	p.BlackholeTx()
	p.BlackholeRx()
	d.say("A", "PAUSES (think: a long GC pause, SIGSTOP, a VM migration): no heartbeats")
	<-heldA.Done()
	d.say("A", "session's local deadline passes; A would step down now, but it is paused and cannot look")

	// 3. etcd expires A's lease, deleting its key; B is granted the lock.
	heldB, err := awaitGrant(ctx, bGranted)
	if err != nil {
		return err
	}
	tokB := heldB.Token()
	d.say("etcd", "A's lease expires: etcd deletes A's key")
	d.say("B", "is granted the lock with token %d (> %d)", tokB.Seq, tokA.Seq)

	// 4. B writes to both resources.
	valB := fmt.Sprintf("paid (by B, token %d)", tokB.Seq)
	plain.write(name, valB)
	if err := guard.Do(tokB, func() error { fenced.write(name, valB); return nil }); err != nil {
		return fmt.Errorf("demo: B's fenced write: %w", err)
	}
	d.say("B", "writes %q to both resources", valB)
	if err := heldB.Unlock(ctx); err != nil {
		return fmt.Errorf("demo: B: %w", err)
	}
	d.say("B", "is done and releases the lock")

	// 5. A resumes and writes with its old token, still believing it holds
	// the lock: the pause came after it last checked.
	p.UnblackholeTx()
	p.UnblackholeRx()
	valA := fmt.Sprintf("unpaid (by A, token %d)", tokA.Seq)
	d.say("A", "RESUMES, still believing it holds the lock, and writes %q:", valA)
	plain.write(name, valA)
	d.say("", "       unfenced resource: write accepted")
	errA := guard.Do(tokA, func() error { fenced.write(name, valA); return nil })
	if !errors.Is(errA, fence.ErrStaleToken) {
		return fmt.Errorf("demo: the fenced write with token %d was not rejected (got %v)", tokA.Seq, errA)
	}
	d.say("", "       fenced resource:   write REJECTED: %v", errA)

	// Only now does A look at its lock (a check before the write would not
	// have helped: the pause can fall between the check and the write).
	<-heldA.Done()
	d.say("A", "checks its lock only now: %v", heldA.Err())

	fmt.Fprintf(d.out, `
Result for %q:
  unfenced resource: %-34q <- CORRUPTED: B's write was lost
  fenced resource:   %-34q <- correct: A's stale write was rejected

A lock alone cannot stop a paused holder: it cannot know it was paused.
The fencing token lets the resource tell: %d < %d, so A's write is refused.
Pass Held.Token() with every write, and check it with a fence.Guard.
`, name, plain.read(name), fenced.read(name), tokA.Seq, tokB.Seq)
	return nil
}

func closeQuietly(s *session.Session) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.Close(ctx)
}

func demoClient(ctx context.Context, addr string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   []string{"http://" + addr},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
}

type embeddedEtcd struct {
	e    *embed.Etcd
	dir  string
	addr string // client host:port
}

func (e *embeddedEtcd) close() {
	e.e.Close()
	os.RemoveAll(e.dir)
}

// startEtcd starts a one-member etcd on loopback ports the kernel picks,
// with its data in a temporary directory and its logs discarded, and a
// short election timeout, so that the demo starts at once. (The
// Prometheus example has its own, plainer one: see its startEtcd for why
// the two are not shared.)
func startEtcd(ctx context.Context) (*embeddedEtcd, error) {
	dir, err := os.MkdirTemp("", "dlock-demo-")
	if err != nil {
		return nil, err
	}
	loopback := []url.URL{{Scheme: "http", Host: "127.0.0.1:0"}}
	cfg := embed.NewConfig()
	cfg.Name = "demo"
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls, cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = loopback, loopback, loopback, loopback
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.TickMs, cfg.ElectionMs = 50, 500
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{os.DevNull}
	cfg.UnsafeNoFsync = true // a throwaway demo cluster
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("demo: start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return &embeddedEtcd{e: e, dir: dir, addr: e.Clients[0].Addr().String()}, nil
	case err := <-e.Err():
		e.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("demo: etcd: %w", err)
	case <-ctx.Done():
		e.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("demo: etcd not ready: %w", ctx.Err())
	}
}

func startProxy(to string) (_ proxy.Server, from string, err error) {
	from, err = freeAddr()
	if err != nil {
		return nil, "", err
	}
	p := proxy.NewServer(proxy.ServerConfig{
		Logger: zap.NewNop(),
		From:   url.URL{Scheme: "tcp", Host: from},
		To:     url.URL{Scheme: "tcp", Host: to},
	})
	select {
	case <-p.Ready():
		return p, from, nil
	case err := <-p.Error():
		p.Close()
		return nil, "", fmt.Errorf("demo: proxy: %w", err)
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("demo: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
