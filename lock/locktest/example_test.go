package locktest_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"testing"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/lock/locktest"
)

// Example shows a backend's conformance test; it needs a *testing.T, so it
// has no output. A real backend starts its server where this one calls
// NewMemory.
func Example() {
	_ = func(t *testing.T) {
		mem := locktest.NewMemory()
		locktest.Run(t, locktest.Backend{
			New:  func(t *testing.T, name string) lock.Locker { return mem.Locker(name) },
			Lose: func(t *testing.T, h lock.Held) { mem.Lose(h.Token().Name) },
		})
	}
}

// store is a resource fenced by a guard: it keeps the last report, and
// writes only for a token at least as high as every earlier writer's.
type store struct {
	guard  *fence.MemoryGuard
	report string // written under the guard's lock
}

func (s *store) put(t fence.Token, report string) error {
	return s.guard.Do(t, func() error { s.report = report; return nil })
}

// publish is the code under test: it renders the report under the lock
// and stores it, fenced by the grant's token.
func publish(ctx context.Context, l lock.Locker, s *store, render func(context.Context) string) error {
	return lock.Do(ctx, l, func(ctx context.Context, h lock.Held) error {
		return s.put(h.Token(), render(ctx))
	})
}

// A test of code that uses lock.Do and a fence.Guard: the lock is lost in
// the middle of the work, another worker takes it and writes, and the
// first worker's late write is rejected by the guard.
func Example_lostLock() {
	ctx := context.Background()
	mem := locktest.NewMemory()
	s := &store{guard: fence.NewMemoryGuard()}

	err := publish(ctx, mem.Locker("report"), s, func(renderCtx context.Context) string {
		// Mid-render, the lock is lost (in production: a session that
		// expired during a long pause).
		mem.Lose("report")
		<-renderCtx.Done()
		fmt.Println("render's ctx:", context.Cause(renderCtx))

		// Another worker takes the lock and publishes.
		if err := publish(ctx, mem.Locker("report"), s, func(context.Context) string { return "report by B" }); err != nil {
			log.Fatal(err)
		}
		// This worker did not look at renderCtx (a paused process could not
		// either): its write comes late.
		return "report by A"
	})
	fmt.Println("A's write rejected:", errors.Is(err, fence.ErrStaleToken))
	fmt.Println("A was told of the loss:", errors.Is(err, lock.ErrLockLost))
	fmt.Println("stored:", s.report)
	_, held := mem.Holder("report")
	fmt.Println("lock still held:", held)
	// Output:
	// render's ctx: locktest: "report": lock: lock lost (Memory.Lose)
	// A's write rejected: true
	// A was told of the loss: true
	// stored: report by B
	// lock still held: false
}

// A Memory's locks grant increasing tokens; Lose ends a grant as a loss
// and hands the lock on.
func ExampleMemory() {
	ctx := context.Background()
	mem := locktest.NewMemory()
	l := mem.Locker("jobs/nightly")

	h, err := l.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	tok, _ := mem.Holder("jobs/nightly")
	fmt.Println("holder:", tok)

	_, err = l.TryLock(ctx)
	fmt.Println("TryLock while held:", errors.Is(err, lock.ErrLocked))

	fmt.Println("Lose:", mem.Lose("jobs/nightly"))
	<-h.Done()
	fmt.Println("Err:", h.Err())
	fmt.Println("Unlock:", errors.Is(h.Unlock(ctx), lock.ErrLockLost))

	h2, err := l.TryLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("next token:", h2.Token().Seq)
	fmt.Println("Unlock:", h2.Unlock(ctx))
	// Output:
	// holder: jobs/nightly:1
	// TryLock while held: true
	// Lose: true
	// Err: locktest: "jobs/nightly": lock: lock lost (Memory.Lose)
	// Unlock: true
	// next token: 2
	// Unlock: <nil>
}
