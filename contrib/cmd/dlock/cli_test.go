package main

import (
	"fmt"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/integration/etcdtest"
)

func TestDemo(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "demo")
	require.Equal(t, 0, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "write REJECTED: fence: stale token")
	assert.Contains(t, r.stdout, "CORRUPTED")

	// The second act: a payment API that deduplicates by key.
	assert.Regexp(t, `without the journal: +2 charges +<- DOUBLE CHARGE`, r.stdout)
	assert.Regexp(t, `with the journal and keys: 1 charge +<- correct`, r.stdout)
	assert.Contains(t, r.stdout, `charges for "invoice-43": without the journal 2, with the journal and keys 1`)
	assert.Regexp(t, `j\.Pending lists A's open intent: op "charge/invoice-43", key charge-invoice-43\.\d+\.\S+, A's token \d+`, r.stdout)
	assert.Regexp(t, `the API replays A's ch_keyed_1: no new charge`, r.stdout)
	assert.Regexp(t, `REFUSED: intent: "charge/invoice-43" ran, but a later holder superseded this one before its outcome was recorded \(that holder finishes it\): fence: stale token`, r.stdout)
	assert.Regexp(t, `tries j\.Do\("charge/invoice-44"\): REFUSED, the API not called: intent: "charge/invoice-44": superseded by a later holder, not started: fence: stale token`, r.stdout)
	assert.Less(t, r.elapsed, 30*time.Second)
	t.Logf("demo took %v:\n%s", r.elapsed, r.stdout)
}

// TestHelp: help asked for goes to stdout, exit 0 (so that "dlock run
// --help | less" shows it); "dlock" alone is a usage error, on stderr.
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, c := range commands {
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
			r := runCLI(t, args...)
			assert.Equal(t, 0, r.code, "dlock %q", args)
			assert.True(t, strings.HasPrefix(r.stdout, "Usage: dlock "+c.name), "dlock %q: stdout %q", args, r.stdout)
			assert.Empty(t, r.stderr, "dlock %q", args)
		}
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		r := runCLI(t, args...)
		assert.Equal(t, 0, r.code, "dlock %q", args)
		assert.Contains(t, r.stdout, "Start here: dlock demo\n", "dlock %q", args)
		assert.Empty(t, r.stderr, "dlock %q", args)
	}
	r := runCLI(t)
	assert.Equal(t, exitUsage, r.code)
	assert.Empty(t, r.stdout)
	assert.Contains(t, r.stderr, "Usage:")
	for _, args := range [][]string{{"help", "nope"}, {"help", "run", "elect"}} {
		r := runCLI(t, args...)
		assert.Equal(t, exitUsage, r.code, "dlock %q", args)
		assert.Empty(t, r.stdout, "dlock %q", args)
		oneLineErr(t, r.stderr)
	}
}

// TestVersion: "dlock version" and "dlock --version" print one line,
// "dlock <version> (<details>)"; a build in a checkout is "(devel)" (or
// the pseudo-version Go derives from the commit).
func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		r := runCLI(t, args...)
		require.Equal(t, 0, r.code, "dlock %q: stderr %s", args, r.stderr)
		assert.Regexp(t, `^dlock (\(devel\)|v\S+) \(go1\.[^)]+\)\n$`, r.stdout, "dlock %q", args)
		assert.Empty(t, r.stderr)
		t.Logf("dlock %s: %s", args[0], r.stdout)
	}
	r := runCLI(t, "version", "extra")
	assert.Equal(t, exitUsage, r.code)
	oneLineErr(t, r.stderr)
}

func TestVersionLine(t *testing.T) {
	vcs := []debug.BuildSetting{
		{Key: "-buildmode", Value: "exe"},
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "727429614c1f6a997bd11026b0340a6447d9c39f"},
		{Key: "vcs.time", Value: "2026-12-06T14:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}
	core := func(v string, replace *debug.Module) []*debug.Module {
		return []*debug.Module{{Path: "github.com/aws/aws-sdk-go-v2", Version: "v1.48.0"}, {Path: coreModule, Version: v, Replace: replace}}
	}
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"go install @v0.1.0", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.0"}, Deps: core("v0.1.0", nil)},
			"dlock v0.1.0 (go1.26.8)"},
		{"a CLI release on an older core", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.1"}, Deps: core("v0.1.0", nil)},
			"dlock v0.1.1 (go1.26.8, core v0.1.0)"},
		{"go build in a checkout", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Deps: core("v0.0.0-00010101000000-000000000000", &debug.Module{Path: "../../..", Version: "(devel)"}), Settings: vcs},
			"dlock (devel) (go1.26.8, vcs 7274296 2026-12-06T14:00:00Z, modified)"},
		{"go build, clean tree, pseudo-version", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261206140000-727429614c1f"}, Deps: core("(devel)", nil), Settings: vcs[:4]},
			"dlock v0.0.0-20261206140000-727429614c1f (go1.26.8, vcs 7274296 2026-12-06T14:00:00Z)"},
		{"a core replaced by a release", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.1"}, Deps: core("v0.1.0", &debug.Module{Path: "github.com/fork/dlock", Version: "v0.1.2"})},
			"dlock v0.1.1 (go1.26.8, core v0.1.2)"},
		{"no main version", debug.BuildInfo{GoVersion: "go1.26.8"}, "dlock (devel) (go1.26.8)"},
	} {
		assert.Equal(t, tc.want, versionLine(&tc.bi), tc.name)
	}
}

func TestBadUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{},
		{"nope"},
		{"run", "--bogus"},
		{"run", "--", "true"},
		{"run", "--lock", "x"},
		{"run", "--lock", "bad name", "--", "true"},
		{"run", "--lock", "x", "--ttl", "1500ms", "--", "true"},
		{"run", "--lock", "x", "--dsn", "redis://127.0.0.1:6379", "--owner", "me", "--", "true"},
		{"run", "--lock", "x", "--dsn", "redis://127.0.0.1:6379", "--ttl", "-1s", "--", "true"},
		{"run", "--lock", "x", "--dsn", "redlock://127.0.0.1:6379,127.0.0.1:6380", "--", "true"},
		{"run", "--lock", "x", "--endpoints", "https://h:2379", "--", "true"},
		{"inspect", "--dsn", "redis://127.0.0.1:6379", "x"},
		{"elect", "--dsn", "redlock://h1,h2,h3", "x", "v"},
		{"run", "--lock", "x", "--dsn", "etcd://h:1", "--endpoints", "h:2", "--", "true"},
		{"inspect"},
		{"inspect", "a", "b"},
		{"elect", "only-name"},
		{"elect", "--observe"},
		{"bench"},
		{"bench", "--dsn", "etcd://127.0.0.1:2379", "--clients", "0"},
		{"bench", "--dsn", "mysql://x"},
		{"demo", "extra"},
	} {
		r := runCLI(t, args...)
		assert.Equal(t, 2, r.code, "dlock %q: stderr %q", args, r.stderr)
		if len(args) > 0 {
			oneLineErr(t, r.stderr)
		}
	}
}

// TestFlagErrors: a refused flag value is named with what was wanted,
// and an explicitly empty --dsn is refused rather than taken for the
// default.
func TestFlagErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--lock", "x", "--ttl", "abc", "--", "true"}, `dlock run: --ttl "abc": not a duration (e.g. 10s, 1m30s) (see --help)`},
		{[]string{"run", "--lock", "x", "--dsn", "", "--", "true"}, `dlock run: --dsn "": empty (give a DSN such as etcd://127.0.0.1:2379, or leave --dsn out to use $DLOCK_DSN or the default) (see --help)`},
		{[]string{"inspect", "--dsn", " ", "x"}, `dlock inspect: --dsn " ": empty`},
		{[]string{"bench", "--dsn", ""}, `dlock bench: --dsn "": empty`},
		{[]string{"bench", "--dsn", "etcd://h:1", "--clients", "many"}, `dlock bench: --clients "many": not a whole number (e.g. 4)`},
		{[]string{"inspect", "--json=maybe", "x"}, `dlock inspect: --json "maybe": not a boolean (true or false)`},
		{[]string{"run", "--lock", "x", "--bogus"}, `dlock run: flag provided but not defined: -bogus (see --help)`},
	} {
		r := runCLI(t, tc.args...)
		assert.Equal(t, exitUsage, r.code, "dlock %q: stderr %q", tc.args, r.stderr)
		oneLineErr(t, r.stderr)
		assert.True(t, strings.HasPrefix(r.stderr, tc.want), "dlock %q: stderr %q", tc.args, r.stderr)
	}
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	ep := etcdtest.FreeAddr(t) // free a moment ago: nothing listens there
	for i, args := range [][]string{
		{"run", "--lock", "x", "--endpoints", ep, "--", "true"},
		{"run", "--lock", "x", "--dsn", "etcd://" + ep, "--", "true"},
		{"run", "--lock", "x", "--dsn", "redis://" + ep, "--", "true"},
		{"inspect", "--endpoints", ep, "x"},
		{"elect", "--endpoints", ep, "x", "v"},
		{"bench", "--dsn", "etcd://" + ep + "?dial_timeout=2s", "--duration", "1s"},
	} {
		t.Run(fmt.Sprintf("%d-%s", i, args[0]), func(t *testing.T) {
			t.Parallel() // each waits out a dial timeout
			r := runCLI(t, args...)
			assert.Equal(t, 1, r.code, "dlock %q: stderr %q", args, r.stderr)
			assert.Less(t, r.elapsed, 10*time.Second, "dlock %q", args)
			oneLineErr(t, r.stderr)
			assert.True(t, strings.Contains(r.stderr, ep), "stderr %q names the endpoint", r.stderr)
		})
	}
}
