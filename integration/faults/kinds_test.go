package faults_test

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/dlock-go/dlock/election"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

// kind is a lock primitive the workers contend on, with the limit its
// exclusion check enforces.
type kind struct {
	name string
	// limit is how many live grants may be in their sections at once; a
	// shared (reader) grant conflicts only with a live exclusive one.
	limit int
	// fenced: the exclusive grants fence (their tokens strictly increase in
	// grant order): their sections write the contention's fenced register,
	// and the FencedMutex history records them.
	fenced bool
	// prefix is the etcd key prefix of the kind's queues.
	prefix string
	// acquire takes one grant of name on s for worker id; shared reports
	// a reader. roll is the round's random draw, for the kinds that choose.
	acquire func(ctx context.Context, s *session.Session, name string, id int, roll uint64) (g lock.Held, shared bool, err error)
}

// The kinds. Every one but skipLock is the real thing.
var (
	mutexKind = kind{name: "mutex", limit: 1, fenced: true, prefix: lock.DefaultPrefix,
		acquire: func(ctx context.Context, s *session.Session, name string, _ int, _ uint64) (lock.Held, bool, error) {
			m, err := lock.New(s, name)
			if err != nil {
				return nil, false, err
			}
			h, err := m.Lock(ctx)
			return h, false, err
		}}

	// semaphoreKind has 2 permits: at most 2 holders at once.
	semaphoreKind = kind{name: "semaphore", limit: 2, prefix: lock.DefaultPrefix,
		acquire: func(ctx context.Context, s *session.Session, name string, _ int, _ uint64) (lock.Held, bool, error) {
			sem, err := lock.NewSemaphore(s, name, 2)
			if err != nil {
				return nil, false, err
			}
			h, err := sem.Acquire(ctx)
			return h, false, err
		}}

	// rwmutexKind takes the write side one time in three: a writer alone,
	// readers together.
	rwmutexKind = kind{name: "rwmutex", limit: 1, fenced: true, prefix: lock.DefaultPrefix,
		acquire: func(ctx context.Context, s *session.Session, name string, _ int, roll uint64) (lock.Held, bool, error) {
			reader := roll%3 != 0
			rw, err := lock.NewRWMutex(s, name)
			if err != nil {
				return nil, false, err
			}
			if reader {
				h, err := rw.RLock(ctx)
				return h, true, err
			}
			h, err := rw.Lock(ctx)
			return h, false, err
		}}

	// electionKind campaigns; a term is a grant, ended by Resign: one
	// leader acting at a time, epochs strictly increasing.
	electionKind = kind{name: "election", limit: 1, fenced: true, prefix: election.DefaultPrefix,
		acquire: func(ctx context.Context, s *session.Session, name string, id int, _ uint64) (lock.Held, bool, error) {
			el, err := election.New(s, name)
			if err != nil {
				return nil, false, err
			}
			t, err := el.Campaign(ctx, fmt.Sprintf("w%d", id))
			if err != nil {
				return nil, false, err
			}
			return term{t}, false, nil
		}}
)

// allKinds are the kinds the soak and the leader-kill scenario run.
var allKinds = []kind{mutexKind, semaphoreKind, rwmutexKind, electionKind}

// term makes a leadership term a lock.Held: Unlock resigns.
type term struct{ *election.Term }

func (t term) Unlock(ctx context.Context) error { return t.Resign(ctx) }

// skipLock is the controls' broken lock: every call is granted at once,
// with a fresh increasing token, and no grant ever ends. Two workers on it
// hold "the lock" together, which the checks must report.
func skipLock() kind {
	var seq atomic.Uint64
	return kind{name: "skip-lock", limit: 1, fenced: true, prefix: lock.DefaultPrefix,
		acquire: func(_ context.Context, _ *session.Session, name string, _ int, _ uint64) (lock.Held, bool, error) {
			return fakeHeld{tok: fence.Token{Name: name, Seq: seq.Add(1)}}, false, nil
		}}
}

type fakeHeld struct{ tok fence.Token }

func (h fakeHeld) Token() fence.Token               { return h.tok }
func (h fakeHeld) Done() <-chan struct{}            { return nil } // never closes
func (h fakeHeld) Err() error                       { return nil }
func (h fakeHeld) Unlock(ctx context.Context) error { return nil }
