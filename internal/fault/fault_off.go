//go:build !dlock_faults

package fault

import "time"

// Enabled reports whether this build has the seam (the tag dlock_faults).
const Enabled = false

// Now returns the seam clock's current time: time.Now in this build.
func Now() time.Time { return time.Now() }

// Until returns the real duration until the seam clock reads t:
// time.Until in this build.
func Until(t time.Time) time.Duration { return time.Until(t) }

// Since returns the seam clock's time elapsed since t: time.Since in this
// build.
func Since(t time.Time) time.Duration { return time.Since(t) }

// Real returns the real time at which the seam clock reads t: t in this
// build.
func Real(t time.Time) time.Time { return t }

// Wall returns Real(t) as a wall-clock time, without monotonic reading.
func Wall(t time.Time) time.Time { return t.Round(0) }

// Planted reports whether the plant name is enabled: never in this build.
func Planted(name string) bool { return false }

// Validity returns v, a session's local validity after a keepalive
// granted ttl: v itself in this build.
func Validity(ttl, v time.Duration) time.Duration { return v }

// OnSessionEnd registers the session-end hook: a no-op in this build.
func OnSessionEnd(fn func(lease int64, deadline time.Time, err error)) {}

// SessionEnded calls the session-end hook: a no-op in this build.
func SessionEnded(lease int64, deadline time.Time, err error) {}
