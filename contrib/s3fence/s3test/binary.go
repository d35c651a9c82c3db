package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Version is the versitygw release the harness builds: the first whose
// posix backend evaluates a conditional PUT and publishes the object in one
// atomic step per key (versitygw#2288).
const Version = "v1.8.0"

// EnvBinary names the environment variable that points at a versitygw
// binary to use instead of the one the harness builds.
const EnvBinary = "DLOCK_VERSITYGW"

// buildTimeout bounds one "go install" of versitygw (module downloads and a
// cold compile on a small machine).
const buildTimeout = 10 * time.Minute

// ErrNotInstalled is returned by Binary (and StartServer) when no versitygw
// binary can be found or built.
var ErrNotInstalled = errors.New("s3test: versitygw not available")

// Binary returns the path of a versitygw binary: $DLOCK_VERSITYGW if set,
// else the one cached for Version in the user's cache directory, building
// it there first if it is missing. A build is bounded by ctx and by ten
// minutes. Errors for a binary that cannot be had match ErrNotInstalled.
func Binary(ctx context.Context) (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("%w: %s=%s: %v", ErrNotInstalled, EnvBinary, p, err)
		}
		return p, nil
	}
	dir, err := cacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "versitygw")
	if executable(bin) == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNotInstalled, err)
	}
	// One build at a time on this machine: test binaries of several
	// packages start servers at once.
	unlock, err := lockFile(ctx, filepath.Join(dir, ".lock"))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNotInstalled, err)
	}
	defer unlock()
	if executable(bin) == nil {
		return bin, nil // built by someone else while we waited
	}
	if err := build(ctx, dir, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// cacheDir is where Binary keeps the binary it builds.
func cacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("%w: no cache directory (%v); set %s", ErrNotInstalled, err, EnvBinary)
	}
	return filepath.Join(base, "dlock", "versitygw-"+Version), nil
}

// build installs versitygw into a fresh directory beside bin and renames it
// into place, so that a reader never sees half a binary.
func build(ctx context.Context, dir, bin string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("%w: no go command to build it with: %v", ErrNotInstalled, err)
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotInstalled, err)
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "install",
		"-ldflags=-X main.Version="+Version,
		"github.com/versity/versitygw/cmd/versitygw@"+Version)
	cmd.Dir = tmp // outside any module or workspace
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOWORK=off", "GOFLAGS=-buildvcs=false")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: go install versitygw@%s: %v\n%s", ErrNotInstalled, Version, err, tail(out.Bytes()))
	}
	if err := os.Rename(filepath.Join(tmp, "versitygw"), bin); err != nil {
		return fmt.Errorf("%w: %v", ErrNotInstalled, err)
	}
	return nil
}

func executable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// tail returns the last few KiB of b.
func tail(b []byte) string {
	const max = 4 << 10
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}
