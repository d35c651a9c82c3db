package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// waitNoteEvery is how often a waiting run says again that it waits.
const waitNoteEvery = time.Minute

// waitNotes tells the user, on stderr, that run waits for a lock and
// behind whom: once when it starts waiting, then every `every` while it
// still waits, each time with the holder of that moment. On etcd the
// holder is read from the lock's queue, as inspect reads it (one Get,
// without the leases' time left); Redis and Redlock do not record who
// holds a lock.
type waitNotes struct {
	w     io.Writer
	what  string        // what run waits for: `lock "jobs/nightly"`
	every time.Duration // waitNoteEvery; shorter in tests

	// etcd only (nil on Redis): the queue, and the lease of this run's
	// session, whose entry in the queue is this run's own.
	queue *inspector
	self  func(context.Context) int64
}

// start prints the notes in a goroutine of its own until stop is called.
// The first note's read runs beside the Lock it describes, so it does not
// delay it; no note is printed once stop has returned.
func (n *waitNotes) start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var (
		mu      sync.Mutex
		stopped bool
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		began := time.Now()
		t := time.NewTicker(n.every)
		defer t.Stop()
		for {
			if line := n.note(ctx, time.Since(began)); line != "" {
				mu.Lock()
				if !stopped {
					fmt.Fprintln(n.w, line)
				}
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
		cancel()
		<-done
	}
}

// note returns the line to print after waiting for waited, or "" if the
// queue shows nobody before this run (it is being granted).
func (n *waitNotes) note(ctx context.Context, waited time.Duration) string {
	head := "dlock run: waiting for " + n.what
	if waited >= n.every {
		head = fmt.Sprintf("dlock run: still waiting for %s after %v", n.what, waited.Round(time.Second))
	}
	if n.queue == nil {
		return head + ": held by another client"
	}
	res, err := n.queue.queue(ctx)
	if err != nil {
		return head + " (who holds it is unknown: " + oneLine(err.Error()) + ")"
	}
	why := behind(res, n.self(ctx))
	if why == "" {
		return ""
	}
	return head + ": " + why
}

// maxNamed is how many holders a note names.
const maxNamed = 3

// behind says who holds the queue res and how many wait before the entry
// of lease self (before the end of the queue if it has none yet), e.g.
// "held by host/123 (token 4711); 2 waiting ahead". It returns "" if
// nobody holds or waits before that entry, or if the entry holds.
func behind(res inspectResult, self int64) string {
	all := append(slices.Clone(res.Holders), res.Waiting...)
	slices.SortFunc(all, func(a, b inspectEntry) int { return a.Position - b.Position })
	var holders []string
	ahead := 0
	for _, en := range all {
		if self != 0 && en.lease == self {
			if en.State == stateHolder {
				return ""
			}
			break
		}
		if en.State != stateHolder {
			ahead++
			continue
		}
		who := strings.TrimSpace(en.Owner)
		if who == "" {
			who = en.Key
		}
		detail := fmt.Sprintf("token %d", en.Seq)
		if en.Kind == kindReadName {
			detail += ", shared"
		}
		holders = append(holders, who+" ("+detail+")")
	}
	var s string
	switch {
	case len(holders) > maxNamed:
		s = "held by " + strings.Join(holders[:maxNamed], ", ") + fmt.Sprintf(" and %d more", len(holders)-maxNamed)
	case len(holders) > 0:
		s = "held by " + strings.Join(holders, ", ")
	case ahead == 0:
		return ""
	default:
		s = "nobody holds it"
	}
	if ahead > 0 {
		s += fmt.Sprintf("; %d waiting ahead", ahead)
	}
	return s
}
