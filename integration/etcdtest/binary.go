package etcdtest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Binary returns the path of the etcd server binary that New starts: the
// one $DLOCK_ETCD names, or etcd's own server main (etcdmain) built from
// this repository's integration/containers module into the user cache on
// first use (rebuilt when that module's go.sum or the Go version changes).
// It fails the test if there is neither.
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
	built.once.Do(func() { built.path, built.err = build() })
	return built.path, built.err
}

// build builds etcdmain from the integration/containers/etcd directory
// found above the working directory, unless the cache has it already.
func build() (string, error) {
	src, err := Source()
	if err != nil {
		return "", err
	}
	sum, err := os.ReadFile(filepath.Join(src, "..", "go.sum"))
	if err != nil {
		sum, err = os.ReadFile(filepath.Join(src, "..", "..", "..", "go.sum")) // before the module split
		if err != nil {
			return "", fmt.Errorf("etcd's go.sum: %w", err)
		}
	}
	h := sha256.Sum256(append(sum, runtime.Version()...))
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
	cmd := exec.Command("go", "build", "-o", tmp.Name(), ".")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build etcd in %s: %w\n%s", src, err, out)
	}
	// Several test binaries may build at once: the rename is atomic.
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	return path, nil
}

// Source finds the directory of etcd's server main in this repository,
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
			return "", errors.New("no etcd binary: set DLOCK_ETCD, or run from a checkout of dlock (which builds integration/containers/etcd)")
		}
		dir = parent
	}
}
