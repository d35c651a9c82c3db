package session

import (
	"testing"
	"time"
)

// A keepalive leaves at the first tick of the grid at or after it is due:
// never early, late by less than a tick, and the tick is at most 500ms and
// at most a quarter of the heartbeat and of the slack before the local
// deadline.
func TestBeatOnGrid(t *testing.T) {
	t.Parallel()
	for _, opts := range [][]Option{{WithTTL(MinTTL)}, {WithTTL(3 * time.Second), WithHeartbeat(100 * time.Millisecond)}, {WithTTL(DefaultTTL)}, {WithTTL(time.Minute)}} {
		o, err := build(opts)
		if err != nil {
			t.Fatal(err)
		}
		ttl := o.ttl
		tick := o.tick()
		if tick <= 0 || tick > maxTick || 4*tick > o.heartbeat || 4*tick > o.ttl-o.margin-o.heartbeat {
			t.Fatalf("ttl %v: tick %v", ttl, tick)
		}
		for i := range 1000 {
			due := gridStart.Add(time.Duration(i-100) * 7919 * time.Microsecond) // some before the grid starts (a slow fault clock)
			got := o.beat(due)
			if got.Before(due) || got.Sub(due) >= tick {
				t.Fatalf("ttl %v: due %v, leaves %v after (tick %v)", ttl, due.Sub(gridStart), got.Sub(due), tick)
			}
			if due.After(gridStart) && got.Sub(gridStart)%tick != 0 {
				t.Fatalf("ttl %v: leaves off the grid: %v", ttl, got.Sub(gridStart))
			}
		}
	}
}
