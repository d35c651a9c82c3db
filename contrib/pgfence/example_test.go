package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock-go/dlock/contrib/pgfence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/intent"
	"github.com/dlock-go/dlock/lock"
)

// The protected write and the fence check commit together: a holder whose
// lock was taken over while it paused gets fence.ErrStaleToken, and its
// UPDATE never commits. (Needs a PostgreSQL server, so it has no Output.)
func ExampleGuard_Do() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	g, err := pgfence.New(pool)
	if err != nil {
		log.Fatal(err)
	}
	if err := g.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	tok := fence.Token{Name: "accounts/7", Seq: 42} // from held.Token()
	err = g.Do(ctx, tok, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance - 10 WHERE id = 7`)
		return err
	})
	if errors.Is(err, fence.ErrStaleToken) {
		fmt.Println("lost the lock while paused; nothing was written:", err)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
}

// AdmitTx fences a transaction the caller already runs.
func ExampleGuard_AdmitTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	g, err := pgfence.New(pool)
	if err != nil {
		log.Fatal(err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) // a no-op after Commit, or after AdmitTx rolled back

	if _, err := tx.Exec(ctx, `INSERT INTO audit (msg) VALUES ('charged account 7')`); err != nil {
		log.Fatal(err)
	}
	if err := g.AdmitTx(ctx, tx, fence.Token{Name: "accounts/7", Seq: 42}); err != nil {
		log.Fatal(err) // stale: tx is already rolled back
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}

// The DDL of a custom table, for a migration tool.
func ExampleGuard_DDL() {
	// pgxpool.New connects lazily: nothing is dialled here.
	pool, err := pgxpool.New(context.Background(), "postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	g, err := pgfence.New(pool, pgfence.WithTable("ops.fences"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(g.DDL())
	// Output:
	// CREATE TABLE IF NOT EXISTS "ops"."fences" (
	// 	name       text           PRIMARY KEY,
	// 	seq        numeric(20, 0) NOT NULL CHECK (seq > 0),
	// 	updated_at timestamptz    NOT NULL DEFAULT now()
	// )
}

// A journal on PostgreSQL for a call that cannot check a token: the intent
// is committed, fenced by the same mark as the Guard, before the call; the
// call carries the intent's key. (Needs a PostgreSQL server and a lock, so
// it has no Output.)
func ExampleNewIntentStore() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := pgfence.NewIntentStore(pool) // the Guard's options, if any
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	j := intent.New(store)

	var held lock.Held                   // from a Locker's Lock
	pending, err := j.Pending(ctx, held) // what earlier holders left open
	if err != nil {
		log.Fatal(err)
	}
	for _, it := range pending {
		fmt.Println("finishing", it.Op, "with key", it.Key)
	}
	err = j.Do(ctx, held, "charge/invoice-42", func(ctx context.Context, key string) error {
		return charge(ctx, 42, key) // the payment API's idempotency key
	})
	if errors.Is(err, intent.ErrSuperseded) {
		fmt.Println("a later holder took over; not charged here:", err)
	}
}

func charge(context.Context, int, string) error { return nil }
