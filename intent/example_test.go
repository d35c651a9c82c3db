package intent_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/intent"
	"github.com/dlock-go/dlock/lock/locktest"
)

// A holder charges an invoice through an API that cannot check a fencing
// token, and loses its grant before it records the charge. The next holder
// finds the open intent and finishes it with the same key: the API's
// deduplication makes the two calls one charge.
func Example() {
	ctx := context.Background()
	locks := locktest.NewMemory() // in a program: a dlock.Client's Locker
	j := intent.New(intent.NewMemory())

	// The payment API: a key it has seen replays the first response.
	seen, charges := map[string]bool{}, 0
	charge := func(_ context.Context, key string) error {
		if !seen[key] {
			seen[key] = true
			charges++
		}
		return nil
	}

	a, _ := locks.Locker("invoices").Lock(ctx)
	_ = j.Do(ctx, a, "charge/invoice-42", func(ctx context.Context, key string) error {
		_ = charge(ctx, key)
		locks.Lose("invoices") // A pauses here, and its grant ends
		return errors.New("paused before recording")
	})

	b, _ := locks.Locker("invoices").Lock(ctx)
	pending, _ := j.Pending(ctx, b)
	for _, it := range pending {
		fmt.Printf("B finishes %s, first written by token %d\n", it.Op, it.Token.Seq)
		_ = j.Do(ctx, b, it.Op, charge)
	}
	err := j.Do(ctx, a, "charge/invoice-43", charge)
	fmt.Println("A, stale:", err)
	fmt.Println("charges:", charges)
	// Output:
	// B finishes charge/invoice-42, first written by token 1
	// A, stale: intent: "charge/invoice-43": superseded by a later holder, not started: fence: stale token for "invoices": seq 1 is below the highest admitted seq 2 (and the grant ended: locktest: "invoices": lock: lock lost (Memory.Lose))
	// charges: 1
}
