package etcdtest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
)

// Binary returns the path of the etcd server binary that New starts: the
// one $DLOCK_ETCD names, or etcd's own server main (etcdmain), built into
// the user cache on first use and kept there: in a checkout of dlock from
// its integration/containers module (rebuilt when that module's go.sum or
// the Go version changes); elsewhere (a user's own module) from the Go
// module proxy, at the version of etcd's client this test binary was built
// with (see ServerVersion). It fails the test if there is none.
func Binary(tb testing.TB) string {
	tb.Helper()
	bin, err := binary()
	if err != nil {
		tb.Fatalf("etcdtest: %v", err)
	}
	return bin
}

var built struct {
	once sync.Once
	path string
	err  error
}

func binary() (string, error) {
	if p := os.Getenv("DLOCK_ETCD"); p != "" {
		return p, nil
	}
	built.once.Do(func() {
		if src, err := Source(); err == nil {
			built.path, built.err = buildCheckout(src)
		} else {
			built.path, built.err = buildRelease(ServerVersion())
		}
	})
	return built.path, built.err
}

// DefaultServerVersion is the etcd version built when the test binary's
// build information does not name etcd's client module.
const DefaultServerVersion = "v3.7.3"

// ServerVersion returns the version of etcd's server that Binary builds
// outside a checkout of dlock: the version of go.etcd.io/etcd/client/v3 in
// the test binary's build (the one dlock's go.mod pins, or a later one
// that the user's module selects), else DefaultServerVersion.
func ServerVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "go.etcd.io/etcd/client/v3" {
				if d.Replace != nil {
					d = d.Replace
				}
				if d.Version != "" && d.Version != "(devel)" {
					return d.Version
				}
			}
		}
	}
	return DefaultServerVersion
}

// buildCheckout builds etcdmain from src, a checkout's
// integration/containers/etcd, unless the cache has it already.
func buildCheckout(src string) (string, error) {
	sum, err := os.ReadFile(filepath.Join(src, "..", "go.sum"))
	if err != nil {
		return "", fmt.Errorf("etcd's go.sum: %w", err)
	}
	what := "etcd (this checkout's integration/containers/etcd)"
	if v := checkoutVersion(filepath.Join(src, "..", "go.mod")); v != "" {
		what = "etcd " + v + " (this checkout's integration/containers/etcd)"
	}
	return buildCached(string(sum), what, func(out string) error {
		return gobuild(src, nil, "build", "-o", out, ".")
	})
}

// buildRelease builds etcdmain at version from the Go module proxy (or the
// module cache), in a module of its own in the user cache, unless the
// cache has it already.
func buildRelease(version string) (string, error) {
	return buildCached("release "+version, "etcd "+version+" from the Go module proxy", func(out string) error {
		dir, err := os.MkdirTemp(filepath.Dir(out), "src-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		files := map[string]string{
			"go.mod":  "module dlock.invalid/etcd\n\nrequire go.etcd.io/etcd/server/v3 " + version + "\n",
			"main.go": "package main\n\nimport (\n\t\"os\"\n\n\t\"go.etcd.io/etcd/server/v3/etcdmain\"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n",
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				return err
			}
		}
		// Outside any workspace; the module cache may be read-only.
		env := []string{"GOWORK=off", "GOFLAGS=-mod=mod", "GO111MODULE=on"}
		if err := gobuild(dir, env, "mod", "tidy"); err != nil {
			return err
		}
		return gobuild(dir, env, "build", "-o", out, ".")
	})
}

// progress is where a build says what it does: stderr (a variable for
// the package's tests).
var progress io.Writer = os.Stderr

// checkoutVersion returns the version of etcd's server that the go.mod at
// path requires, or "" if it names none.
func checkoutVersion(path string) string {
	data, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "go.etcd.io/etcd/server/v3" {
			return f[1]
		}
	}
	return ""
}

// buildCached returns the binary cached under key (and the Go version),
// building it with build into a temporary name first: several test
// binaries may build at once, and the rename is atomic. A build says so on
// stderr at once, naming what (the etcd it builds) and the one-time cost:
// the first test that needs etcd is otherwise silent for minutes.
func buildCached(key, what string, build func(out string) error) (string, error) {
	h := sha256.Sum256([]byte(key + runtime.Version()))
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "dlock", "etcd-"+hex.EncodeToString(h[:8]))
	path := filepath.Join(dir, "etcd")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, "etcd-*.tmp")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	fmt.Fprintf(progress, "etcdtest: building %s into %s (once, ~2 min; later runs reuse it; $DLOCK_ETCD names a binary instead)\n", what, dir)
	start := time.Now()
	if err := build(tmp.Name()); err != nil {
		return "", err
	}
	fmt.Fprintf(progress, "etcdtest: built %s in %s\n", what, time.Since(start).Round(time.Second))
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	return path, nil
}

func gobuild(dir string, env []string, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building etcd: go %v in %s: %w\n%s", args, dir, err, out)
	}
	return nil
}

// Source finds the directory of etcd's server main in a checkout of dlock,
// integration/containers/etcd, in the working directory or one of its
// parents (a test runs in its package's directory, in any module of the
// repository).
func Source() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		src := filepath.Join(dir, "integration", "containers", "etcd")
		if _, err := os.Stat(filepath.Join(src, "main.go")); err == nil {
			return src, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not in a checkout of dlock (no integration/containers/etcd above the working directory)")
		}
		dir = parent
	}
}
