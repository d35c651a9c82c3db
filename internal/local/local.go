// Package local gives the packages built on sessions a place for
// per-session state (a queue's key names, epochs, leftovers) that lives and
// dies with one Session value: package session puts a Store in every
// session's Context, and only this module can name it. State kept by lease
// ID instead would be shared by two sessions on two clusters that happen to
// get the same ID.
package local

import (
	"context"
	"sync"
	"sync/atomic"
)

// Store holds one session's values, by key, and the function its
// heartbeat loop runs after each acknowledged keepalive. It is safe for
// concurrent use.
type Store struct {
	m    sync.Map
	beat atomic.Pointer[func(context.Context)]
}

// OnHeartbeat makes f run in ctx's session's heartbeat loop after each
// acknowledged keepalive (replacing an earlier f). f runs in the loop's
// goroutine, under a context bounded well within the heartbeat interval:
// it must be quick, and it ends with the session (Close waits for it).
func OnHeartbeat(ctx context.Context, f func(context.Context)) {
	mustStore(ctx).beat.Store(&f)
}

// Beat runs the function OnHeartbeat set, if any. Package session calls it.
func (s *Store) Beat(ctx context.Context) {
	if f := s.beat.Load(); f != nil {
		(*f)(ctx)
	}
}

func mustStore(ctx context.Context) *Store {
	s, ok := ctx.Value(storeKey{}).(*Store)
	if !ok {
		panic("local: context carries no Store")
	}
	return s
}

type storeKey struct{}

// NewContext returns a copy of ctx carrying s.
func NewContext(ctx context.Context, s *Store) context.Context {
	return context.WithValue(ctx, storeKey{}, s)
}

// Get returns the value of type T stored under key in ctx's Store, storing
// mk() first if there is none. It panics if ctx carries no Store: every
// session's Context does.
func Get[T any](ctx context.Context, key any, mk func() *T) *T {
	s := mustStore(ctx)
	if v, ok := s.m.Load(key); ok {
		return v.(*T)
	}
	v, _ := s.m.LoadOrStore(key, mk())
	return v.(*T)
}
