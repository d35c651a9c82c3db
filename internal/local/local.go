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
)

// Store holds one session's values, by key. It is safe for concurrent use.
type Store struct{ m sync.Map }

type storeKey struct{}

// NewContext returns a copy of ctx carrying s.
func NewContext(ctx context.Context, s *Store) context.Context {
	return context.WithValue(ctx, storeKey{}, s)
}

// Get returns the value of type T stored under key in ctx's Store, storing
// mk() first if there is none. It panics if ctx carries no Store: every
// session's Context does.
func Get[T any](ctx context.Context, key any, mk func() *T) *T {
	s, ok := ctx.Value(storeKey{}).(*Store)
	if !ok {
		panic("local: context carries no Store")
	}
	if v, ok := s.m.Load(key); ok {
		return v.(*T)
	}
	v, _ := s.m.LoadOrStore(key, mk())
	return v.(*T)
}
