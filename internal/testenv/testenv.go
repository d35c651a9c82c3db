// Package testenv decides what a test does when a dependency (a redis-server
// binary, a PostgreSQL server, a Docker engine) is missing: skip with a
// message, or fail when DLOCK_REQUIRE says the dependency is required (CI
// sets DLOCK_REQUIRE=all).
package testenv

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// Required reports whether the dependency named what must be present:
// DLOCK_REQUIRE is "all" or a comma-separated list that contains what.
func Required(what string) bool {
	v := os.Getenv("DLOCK_REQUIRE")
	if v == "" {
		return false
	}
	parts := strings.Split(v, ",")
	return slices.Contains(parts, "all") || slices.Contains(parts, what)
}

// Missing ends the test because the dependency named what is unavailable:
// it fails the test if Required(what), and skips it with the reason
// otherwise.
func Missing(t testing.TB, what, reason string) {
	t.Helper()
	if Required(what) {
		t.Fatalf("%s is required (DLOCK_REQUIRE=%s) but unavailable: %s", what, os.Getenv("DLOCK_REQUIRE"), reason)
	}
	t.Skipf("skipping: %s unavailable: %s (set DLOCK_REQUIRE=all to make this a failure)", what, reason)
}

// LongVar is the variable that turns the long tests on: the cluster fault
// harness's runs, the release check, the capacity smoke and the container
// cluster scenario. README.md's second test command sets it; without it
// `go test github.com/dlock-go/dlock/...` answers in minutes.
const LongVar = "DLOCK_LONG"

// Long reports whether the long tests run: LongVar is set to anything but
// "" or "0".
func Long() bool {
	v := os.Getenv(LongVar)
	return v != "" && v != "0"
}

// SkipUnlessLong skips a long test unless Long(), saying what it runs and
// how long it takes (cost: "~5 min"), and how to run it. A long test is a
// choice, not a missing dependency: DLOCK_REQUIRE does not make it fail.
func SkipUnlessLong(t testing.TB, cost string) {
	t.Helper()
	if !Long() {
		t.Skipf("skipping: a long test (%s); %s=1 runs it (README.md: the long tests)", cost, LongVar)
	}
}
