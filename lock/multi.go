package lock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/dlock-go/dlock/internal/cleanup"
	"github.com/dlock-go/dlock/internal/lossctx"
)

// keyed is what LockAll needs from a Locker: its lock key (see LockAll).
type keyed interface{ LockKey() string }

// LockAll acquires every Locker of ls, all or nothing, and returns their
// grants in argument order: hs[i] is the grant of ls[i].
//
// The locks are taken one at a time in one global order, the order of
// their lock keys, so callers whose sets overlap never wait for each other
// in a cycle, whatever order each passes them in. A Locker gives its key
// through a method
//
//	LockKey() string
//
// that names the lock the same way in every process: the backend, then
// where the lock lives. This package's Mutex and RWMutex return "etcd:"
// and their queue's key prefix (a Mutex and an RWMutex of one name and
// prefix are one lock); package redis's Mutex and Redlock return "redis:"
// and "redlock:" and their lock key. A Locker without LockKey (a wrapper
// that does not pass its inner Locker's key on) is refused with an error matching
// errors.ErrUnsupported, and so are two Lockers of one lock (the same key):
// the second would wait for the first forever. These checks come before
// any acquire.
//
// If an acquire fails, ctx ends, or a grant already taken is lost while a
// later lock is awaited, LockAll releases what it took (under a context
// detached from ctx, bounded by a few seconds) and returns an error that
// names the lock (its index in ls and its key) and matches the cause:
// ctx.Err() when ctx ended, ErrLockLost (and the grant's Err) on a loss,
// the Locker's error otherwise. Each Locker's own acquire leaves nothing
// behind when it fails, so nothing is.
//
// Each grant keeps its own Token, Done and Unlock: unlock every one of hs
// when done, or use DoAll. A grant may be lost at any moment after LockAll
// returns; watch each Done (DoAll does).
func LockAll(ctx context.Context, ls ...Locker) ([]Held, error) {
	order, keys, err := lockOrder(ls)
	if err != nil {
		return nil, err
	}
	hs := make([]Held, len(ls))
	taken := make([]int, 0, len(ls)) // indices into ls, in acquisition order
	// The wait for each lock ends when ctx ends or when any grant taken
	// before it is lost: each grant adds its watcher on top of the
	// previous context.
	wait := ctx
	var stops []func()
	defer func() {
		for _, stop := range slices.Backward(stops) {
			stop()
		}
	}()
	fail := func(i int, err error) ([]Held, error) {
		if ctx.Err() == nil {
			if j, lost := firstLost(hs, taken); lost != nil {
				err = fmt.Errorf("lock: lock all: ls[%d] (%s) lost while acquiring ls[%d] (%s): %w", j, keys[j], i, keys[i], lost)
				return nil, releaseAll(ctx, hs, taken, err)
			}
		} else if !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		return nil, releaseAll(ctx, hs, taken, fmt.Errorf("lock: lock all: ls[%d] (%s): %w", i, keys[i], err))
	}
	for n, i := range order {
		h, err := ls[i].Lock(wait)
		if err == nil && h == nil {
			err = errors.New("its Lock returned neither a Held nor an error")
		}
		if h != nil {
			hs[i] = h
			taken = append(taken, i)
		}
		if err != nil || wait.Err() != nil {
			if err == nil {
				err = context.Cause(wait)
			}
			return fail(i, err)
		}
		if n < len(order)-1 {
			var stop func()
			wait, stop = lossctx.With(wait, ErrLockLost, h)
			stops = append(stops, stop)
		}
	}
	// A loss the watchers have not passed on yet.
	if j, lost := firstLost(hs, taken); lost != nil {
		err := fmt.Errorf("lock: lock all: ls[%d] (%s) lost while acquiring the others: %w", j, keys[j], lost)
		return nil, releaseAll(ctx, hs, taken, err)
	}
	return hs, nil
}

// DoAll is Do for several locks: it acquires ls with LockAll, runs fn with
// their grants (in argument order) under a context that is cancelled as
// soon as any of them may be lost (the cause is that grant's Err, matching
// ErrLockLost), and unlocks them all when fn returns or panics (under a
// context detached from ctx, bounded by a few seconds; a panic is re-raised
// after the unlocks).
//
// It returns LockAll's error, or fn's error, or the unlocks' error if fn
// succeeded; if a lock was lost while fn ran, the returned error also
// matches ErrLockLost. See Do for how fn should use the grants' tokens,
// and the package documentation for a write that spans two locks'
// resources.
func DoAll(ctx context.Context, ls []Locker, fn func(ctx context.Context, hs []Held) error) error {
	hs, err := LockAll(ctx, ls...)
	if err != nil {
		return err
	}
	return holding(ctx, hs, func(ctx context.Context) error { return fn(ctx, hs) })
}

// lockOrder returns the indices of ls in the order of their lock keys, and
// the keys; an error if a Locker is nil, has no key, or shares its key with
// another.
func lockOrder(ls []Locker) (order []int, keys []string, err error) {
	keys = make([]string, len(ls))
	order = make([]int, len(ls))
	for i, l := range ls {
		order[i] = i
		if l == nil {
			return nil, nil, fmt.Errorf("lock: lock all: ls[%d] is nil", i)
		}
		k, ok := l.(keyed)
		if !ok {
			return nil, nil, fmt.Errorf("lock: lock all: ls[%d] (%T) has no LockKey method, so its place in the global lock order is unknown: %w", i, l, errors.ErrUnsupported)
		}
		keys[i] = k.LockKey()
		if keys[i] == "" {
			return nil, nil, fmt.Errorf("lock: lock all: ls[%d] (%T) has an empty LockKey", i, l)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(keys[a], keys[b]) })
	for n := 1; n < len(order); n++ {
		if a, b := order[n-1], order[n]; keys[a] == keys[b] {
			return nil, nil, fmt.Errorf("lock: lock all: ls[%d] and ls[%d] are the same lock (%s): the second would wait for the first forever", min(a, b), max(a, b), keys[a])
		}
	}
	return order, keys, nil
}

// firstLost returns the first of the taken grants whose Done has closed
// other than by Unlock, and why.
func firstLost(hs []Held, taken []int) (int, error) {
	for _, i := range taken {
		select {
		case <-hs[i].Done():
			err := hs[i].Err()
			if err == nil {
				err = ErrLockLost
			}
			return i, err
		default:
		}
	}
	return -1, nil
}

// releaseAll unlocks the taken grants, the last taken first, under a
// context detached from ctx and bounded, and returns err, with any unlock
// failure other than a loss (the lock is gone either way) added.
func releaseAll(ctx context.Context, hs []Held, taken []int, err error) error {
	uctx, cancel := cleanup.Context(ctx)
	defer cancel()
	var failed []error
	for _, i := range slices.Backward(taken) {
		if uerr := hs[i].Unlock(uctx); uerr != nil && !errors.Is(uerr, ErrLockLost) {
			failed = append(failed, uerr)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w (and releasing the locks taken failed: %w)", err, errors.Join(failed...))
	}
	return err
}
