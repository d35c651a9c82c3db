package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

// exampleSession starts embedded etcd and a session on it; stop releases
// everything.
func exampleSession() (s *session.Session, cli *clientv3.Client, stop func()) {
	c, err := etcdtest.Start()
	if err != nil {
		log.Fatal(err)
	}
	cli, err = clientv3.New(c.Config())
	if err != nil {
		log.Fatal(err)
	}
	s, err = session.New(context.Background(), cli)
	if err != nil {
		log.Fatal(err)
	}
	return s, cli, func() {
		s.Close(context.Background())
		cli.Close()
		c.Close()
	}
}

// A lock's tokens grow with every holder, so a resource that checks them
// rejects a holder that lost its lock.
func ExampleMutex() {
	s, _, stop := exampleSession()
	defer stop()
	ctx := context.Background()

	m, err := lock.New(s, "invoices/eu")
	if err != nil {
		log.Fatal(err)
	}
	guard := fence.NewMemoryGuard() // stands in for the resource

	first, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first holder admitted:", guard.Admit(ctx, first.Token()) == nil)
	if err := first.Unlock(ctx); err != nil {
		log.Fatal(err)
	}

	second, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer second.Unlock(ctx)
	fmt.Println("second holder admitted:", guard.Admit(ctx, second.Token()) == nil)
	fmt.Println("first holder, late, rejected:", errors.Is(guard.Admit(ctx, first.Token()), fence.ErrStaleToken))
	// Output:
	// first holder admitted: true
	// second holder admitted: true
	// first holder, late, rejected: true
}

// Do runs a function under the lock, with a context cancelled as soon as
// the lock may be lost.
func ExampleDo() {
	s, _, stop := exampleSession()
	defer stop()
	m, err := lock.New(s, "reports/nightly")
	if err != nil {
		log.Fatal(err)
	}
	err = lock.Do(context.Background(), m, func(ctx context.Context, h lock.Held) error {
		fmt.Println("holding", h.Token().Name)
		return nil // write to the resource with h.Token() here
	})
	fmt.Println("err:", err)
	// Output:
	// holding reports/nightly
	// err: <nil>
}

// DoAll takes both accounts' locks, in one global order whatever order
// other transfers name them in, and runs the transfer under both.
func ExampleDoAll() {
	s, _, stop := exampleSession()
	defer stop()
	from, err := lock.New(s, "accounts/alice")
	if err != nil {
		log.Fatal(err)
	}
	to, err := lock.New(s, "accounts/bob")
	if err != nil {
		log.Fatal(err)
	}
	err = lock.DoAll(context.Background(), []lock.Locker{to, from}, func(ctx context.Context, hs []lock.Held) error {
		// hs[0] is to's grant, hs[1] from's. Write both balances in one
		// transaction that admits both tokens, so that it commits only
		// while neither lock has passed to someone else.
		fmt.Println("holding", hs[0].Token().Name, "and", hs[1].Token().Name)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// holding accounts/bob and accounts/alice
	// err: <nil>
}

// IsOwner makes a write inside etcd commit only while the lock is held.
func ExampleGrant_IsOwner() {
	s, cli, stop := exampleSession()
	defer stop()
	ctx := context.Background()
	m, err := lock.New(s, "config")
	if err != nil {
		log.Fatal(err)
	}
	h, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	g := h.(*lock.Grant)
	resp, err := cli.Txn(ctx).If(g.IsOwner()).Then(clientv3.OpPut("config/value", "42")).Commit()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("committed while held:", resp.Succeeded)
	if err := h.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	resp, err = cli.Txn(ctx).If(g.IsOwner()).Then(clientv3.OpPut("config/value", "43")).Commit()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("committed after unlock:", resp.Succeeded)
	// Output:
	// committed while held: true
	// committed after unlock: false
}
