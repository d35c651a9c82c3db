package faults_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/integration/etcdtest"
)

// exclusion is the real-time exclusion check: every worker reports when it
// enters and leaves its critical section, with its grant's Done. A grant
// whose Done is still open is live. Entering is a violation when it makes
// more than limit live grants at once, or puts a live reader beside a live
// exclusive grant (or the reverse). The lock's contract is exactly that a
// grant's Done closes no later than anyone else can be granted, so a
// holder that overlaps the next one after its own Done closed is not a
// violation (it is counted as tolerated: the fence's business); a live
// one is. It is safe for concurrent use.
type exclusion struct {
	limit int

	mu         sync.Mutex
	in         map[int]section
	maxLive    int
	violations int
	first      []string // the first few violations, described
	tolerated  int
}

type section struct {
	shared bool
	tok    uint64
	done   <-chan struct{}
	since  time.Time
}

func newExclusion(limit int) *exclusion {
	return &exclusion{limit: limit, in: make(map[int]section)}
}

// enter records that worker id entered its section with a grant of token
// tok (a reader's if shared) that ends when done closes.
func (e *exclusion) enter(id int, shared bool, tok uint64, done <-chan struct{}) {
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	var all, live []int
	for other, s := range e.in {
		all = append(all, other)
		if !isDone(s.done) {
			live = append(live, other)
		}
	}
	e.in[id] = section{shared: shared, tok: tok, done: done, since: now}
	if !isDone(done) {
		e.maxLive = max(e.maxLive, len(live)+1)
	}
	switch {
	case !e.conflict(shared, all):
	case isDone(done) || !e.conflict(shared, live):
		e.tolerated++
	default:
		e.violations++
		if len(e.first) < 3 {
			var ws []string
			for _, o := range live {
				s := e.in[o]
				ws = append(ws, fmt.Sprintf("worker %d (token %d, shared %v, in for %v)", o, s.tok, s.shared, now.Sub(s.since).Round(time.Microsecond)))
			}
			e.first = append(e.first, fmt.Sprintf("worker %d entered with token %d (shared %v) beside live %s", id, tok, shared, strings.Join(ws, ", ")))
		}
	}
}

// conflict reports whether a grant (a reader's if shared) may not be in
// its section beside the workers ids.
func (e *exclusion) conflict(shared bool, ids []int) bool {
	if !shared {
		return len(ids) >= e.limit
	}
	for _, id := range ids {
		if !e.in[id].shared {
			return true
		}
	}
	return false
}

// exit records that worker id left its section.
func (e *exclusion) exit(id int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.in, id)
}

// report returns the number of violations and the first few, described.
func (e *exclusion) report() (int, []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.violations, append([]string(nil), e.first...)
}

// figures returns the most live grants seen at once and the overlaps
// tolerated (with a grant whose Done had closed).
func (e *exclusion) figures() (maxLive, tolerated int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.maxLive, e.tolerated
}

// The control: the checks must catch a lock that does not exclude. Two
// workers run the scenarios' own loop, with the same 1-30 ms holds, on
// skipLock, a "lock" that grants every call at once and never ends a
// grant (two holders that skip the lock). The exclusion check must see
// them in their sections together, and the FencedMutex history must be
// Illegal: a lock that did this in a scenario would fail it.
func TestChecksCatchHoldersThatSkipTheLock(t *testing.T) {
	t.Setenv("DLOCK_ARTIFACTS", t.TempDir()) // the failed checks are expected
	seed := seedFor(t, "", "")
	c := etcdtest.New(t)
	ctx := ctxFor(t)
	clients := []*clientv3.Client{c.Client(t), c.Client(t)}
	con := newContention(t, skipLock(), "skip-lock", 5*time.Second, seed)
	f := newFleet(t)
	f.add(ctx, con, clients)
	require.NoError(t, con.waitGrants(ctx, 40))
	f.halt()

	f.figures(t)
	bad := f.check(t)
	for _, b := range bad {
		t.Logf("caught: %s", b)
	}
	n, _ := con.excl.report()
	assert.Positive(t, n, "the exclusion check must see two live holders at once")
	assert.True(t, slices.ContainsFunc(bad, func(s string) bool { return strings.Contains(s, "mutex history Illegal") }),
		"the FencedMutex check must reject the history: %q", bad)
}

// The exclusion check's rules, one by one: what each kind allows, and that
// a holder whose grant has ended (Done closed) is tolerated beside the
// next one, but a live one is not.
func TestExclusionRules(t *testing.T) {
	open, closed := make(chan struct{}), make(chan struct{})
	close(closed)
	type in struct {
		id     int
		shared bool
		done   <-chan struct{}
	}
	cases := []struct {
		name       string
		limit      int
		enter      []in
		violations int
		tolerated  int
	}{
		{"mutex: one holder", 1, []in{{1, false, open}}, 0, 0},
		{"mutex: two live holders", 1, []in{{1, false, open}, {2, false, open}}, 1, 0},
		{"mutex: beside an ended grant", 1, []in{{1, false, closed}, {2, false, open}}, 0, 1},
		{"mutex: an ended grant enters", 1, []in{{1, false, open}, {2, false, closed}}, 0, 1},
		{"semaphore: two permits", 2, []in{{1, false, open}, {2, false, open}}, 0, 0},
		{"semaphore: three live holders", 2, []in{{1, false, open}, {2, false, open}, {3, false, open}}, 1, 0},
		{"semaphore: three, one ended", 2, []in{{1, false, closed}, {2, false, open}, {3, false, open}}, 0, 1},
		{"rwmutex: readers together", 1, []in{{1, true, open}, {2, true, open}, {3, true, open}}, 0, 0},
		{"rwmutex: a writer beside a reader", 1, []in{{1, true, open}, {2, false, open}}, 1, 0},
		{"rwmutex: a reader beside a writer", 1, []in{{1, false, open}, {2, true, open}}, 1, 0},
		{"rwmutex: a reader beside an ended writer", 1, []in{{1, false, closed}, {2, true, open}}, 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newExclusion(tc.limit)
			for _, x := range tc.enter {
				e.enter(x.id, x.shared, uint64(x.id), x.done)
			}
			n, first := e.report()
			_, tolerated := e.figures()
			assert.Equal(t, tc.violations, n, "violations: %q", first)
			assert.Equal(t, tc.tolerated, tolerated, "tolerated")
			for _, x := range tc.enter {
				e.exit(x.id)
			}
			e.enter(9, false, 9, open)
			n, _ = e.report()
			assert.Equal(t, tc.violations, n, "after every exit a holder is alone")
		})
	}
}
