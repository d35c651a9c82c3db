package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
)

const versionDescription = `
Prints one line: "dlock <version> (<details>)", from the build information
the Go toolchain stores in the binary. <version> is the module version a
"go install github.com/dlock-go/dlock/contrib/cmd/dlock@v0.1.0" build
records (v0.1.0), or "(devel)" for a "go build" in a checkout, or the
pseudo-version a newer Go derives from the checkout's commit. The details
are the Go version; the core module's version, when it is another; and,
when the build recorded them (a "go build" in a git checkout), the VCS
revision, its commit time and "modified" if the work tree had
uncommitted changes. "dlock --version" is the same.`

func runVersion(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "version", "", versionDescription)
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(e.stdout, "dlock (unknown) (built without module support)")
		return nil
	}
	fmt.Fprintln(e.stdout, versionLine(bi))
	return nil
}

// coreModule is the module path of the dlock SDK, which the CLI's module
// requires.
const coreModule = "github.com/dlock-go/dlock"

// versionLine formats bi as "dlock <version> (<go version>[, core
// <version>][, vcs <revision> <time>[, modified]])", for example
// "dlock v0.1.0 (go1.26.8)" or "dlock (devel) (go1.26.8, vcs 7274296
// 2026-12-06T14:00:00Z, modified)". The core module's version is shown
// when it is another release than the CLI's: not when the core comes
// from the same checkout (a go.work workspace, or a replace by a
// directory, both "(devel)" in the build info).
func versionLine(bi *debug.BuildInfo) string {
	version := bi.Main.Version
	if version == "" {
		version = "(devel)"
	}
	details := []string{bi.GoVersion}
	for _, d := range bi.Deps {
		if d.Path != coreModule {
			continue
		}
		if d.Replace != nil {
			d = d.Replace
		}
		if d.Version != "" && d.Version != "(devel)" && d.Version != version {
			details = append(details, "core "+d.Version)
		}
	}
	vcs := map[string]string{}
	for _, s := range bi.Settings {
		vcs[s.Key] = s.Value
	}
	if rev := vcs["vcs.revision"]; rev != "" {
		details = append(details, strings.TrimSpace("vcs "+rev[:min(len(rev), 7)]+" "+vcs["vcs.time"]))
		if vcs["vcs.modified"] == "true" {
			details = append(details, "modified")
		}
	}
	return "dlock " + version + " (" + strings.Join(details, ", ") + ")"
}
