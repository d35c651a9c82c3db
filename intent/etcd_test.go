package intent_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/intent"
	"github.com/dlock-go/dlock/intent/intenttest"
	"github.com/dlock-go/dlock/lock"
)

func TestEtcd(t *testing.T) {
	t.Parallel()
	cli := etcdtest.New(t).Client(t)
	st := intent.NewEtcd(cli, "dlock/lock")
	intenttest.Run(t, intenttest.Backend{New: func(*testing.T) intent.Store { return st }})
}

// hidden is a grant without IsOwner: the etcd store fences it by the mark
// alone.
type hidden struct{ lock.Held }

// TestEtcdOwnership: an etcd grant whose key is gone is refused by the
// store (the Txn compares the grant's ownership) before any later holder
// writes to the journal; the control, the same grant without IsOwner, is
// admitted: only the mark fences it, and no later holder has moved it.
func TestEtcdOwnership(t *testing.T) {
	t.Parallel()
	cli := etcdtest.New(t).Client(t)
	ctx := etcdtest.Context(t)
	m, err := lock.New(etcdtest.Session(t, cli), "billing/eu")
	if err != nil {
		t.Fatal(err)
	}
	h, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := intent.NewEtcd(cli, "dlock/lock")
	op := intent.Intent{Op: "charge/order-1", Token: h.Token()}
	op.Key = intent.Key(h.Token().Name, op.Op, h.Token().Seq)
	if _, err := st.Begin(ctx, h, op); err != nil {
		t.Fatalf("Begin by the holder: %v", err)
	}
	// The grant ends behind the holder's back (its lease expired, say);
	// its Done has not closed yet.
	if _, err := cli.Delete(ctx, h.(*lock.Grant).Key()); err != nil {
		t.Fatal(err)
	}
	op2 := intent.Intent{Op: "charge/order-2", Token: h.Token(), Key: "k2"}
	if _, err := st.Begin(ctx, h, op2); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("Begin after the grant's key was deleted = %v, want lock.ErrLockLost", err)
	}
	if err := st.Finish(ctx, h, op.Op, ""); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("Finish after the grant's key was deleted = %v, want lock.ErrLockLost", err)
	}
	// The control: without the ownership compare the stale write lands.
	if _, err := st.Begin(ctx, hidden{h}, op2); err != nil {
		t.Fatalf("control: Begin by the mark alone = %v, want it admitted (nothing else fences it)", err)
	}
	n, err := cli.Get(ctx, "dlock/lock/billing%2Feu!intent/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || n.Count != 5 {
		t.Fatalf("journal keys: %v, %v; want the mark and two open records (each with its open/ entry)", n, err)
	}
}

// TestEtcdKeysBesideTheLock: the journal's keys are not in the lock's
// queue: a lock on the same name still grants at once.
func TestEtcdKeysBesideTheLock(t *testing.T) {
	t.Parallel()
	cli := etcdtest.New(t).Client(t)
	ctx := etcdtest.Context(t)
	s := etcdtest.Session(t, cli)
	m, err := lock.New(s, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	j := intent.New(intent.NewEtcd(cli, "dlock/lock"))
	for i := range 2 {
		h, err := m.TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock %d with the journal beside the lock: %v", i, err)
		}
		if err := j.Do(ctx, h, "op", func(context.Context, string) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := etcdtest.KeyCount(t, cli, m.Prefix()); n != 0 {
		t.Fatalf("%d keys in the lock's queue after Unlock, want 0", n)
	}
}

// BenchmarkDo measures what the journal adds to a call: a bare call to an
// HTTP server on loopback, against the same call through Journal.Do on
// etcd (3 members, fsync on), one grant throughout.
func BenchmarkDo(b *testing.B) {
	call := intenttest.HTTPCall(b)
	cli := etcdtest.New(b, etcdtest.WithMembers(3), etcdtest.WithFsync()).Client(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	m, err := lock.New(etcdtest.Session(b, cli), "bench/intent")
	if err != nil {
		b.Fatal(err)
	}
	h, err := m.Lock(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Unlock(ctx)
	b.Run("bare", func(b *testing.B) {
		for b.Loop() {
			if err := call(ctx, "k"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("journal=etcd", func(b *testing.B) {
		j := intent.New(intent.NewEtcd(cli, "dlock/lock"))
		i := 0
		for b.Loop() {
			i++
			if err := j.Do(ctx, h, "op-"+itoa(i), call); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func itoa(i int) string { return strconv.Itoa(i) }
