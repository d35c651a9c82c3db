package containers

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// RedisImage is the official name the locally built Redis image is tagged
// with. Its version matches the redis-server that BuildRedis packages.
const RedisImage = "redis:7.0.15"

// RedisServer is the host's redis-server that BuildRedis packages.
const RedisServer = "/usr/bin/redis-server"

// RedisArgs are the image's default arguments (its CMD): reachable on the
// container's port 6379 from any address, no persistence, never evict a key,
// and a writable working directory.
var RedisArgs = []string{
	"--bind", "0.0.0.0",
	"--port", "6379",
	"--protected-mode", "no",
	"--save", "",
	"--appendonly", "no",
	"--maxmemory-policy", "noeviction",
	"--dir", "/tmp",
}

// BuildRedis makes sure RedisImage exists in the local Docker engine: if it
// is missing, it builds an image FROM scratch holding RedisServer and every
// shared library ldd lists for it (the dynamic loader included), each at
// the path ldd prints, plus an empty /tmp. The entrypoint is the server and
// the default arguments are RedisArgs. It returns the image's name.
//
// BuildRedis refuses a RedisServer of another version than the tag's. It
// needs the docker CLI and ldd on PATH; ctx bounds the whole
// build (BuildTimeout is a sensible bound).
func BuildRedis(ctx context.Context) (image string, err error) {
	if exec.CommandContext(ctx, "docker", "image", "inspect", RedisImage).Run() == nil {
		return RedisImage, nil
	}
	dir, err := os.MkdirTemp("", "dlock-redis-image-")
	if err != nil {
		return "", fmt.Errorf("containers: build %s: %w", RedisImage, err)
	}
	defer os.RemoveAll(dir)
	if err := redisContext(ctx, dir); err != nil {
		return "", fmt.Errorf("containers: build %s: %w", RedisImage, err)
	}
	if out, err := exec.CommandContext(ctx, "docker", "build", "-t", RedisImage, dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("containers: docker build %s: %w\n%s", RedisImage, err, out)
	}
	return RedisImage, nil
}

// redisContext writes the build context into dir: rootfs/ (the server, its
// libraries, an empty tmp) and the Dockerfile.
func redisContext(ctx context.Context, dir string) error {
	// The image is tagged with the official name of one version: refuse to
	// mislabel another.
	out, err := exec.CommandContext(ctx, RedisServer, "--version").Output()
	if err != nil {
		return fmt.Errorf("%s --version: %w", RedisServer, err)
	}
	if want := "v=" + strings.TrimPrefix(RedisImage, "redis:") + " "; !strings.Contains(string(out), want) {
		return fmt.Errorf("%s is not the version the tag names (%s): %s", RedisServer, RedisImage, strings.TrimSpace(string(out)))
	}
	libs, err := sharedLibraries(ctx, RedisServer)
	if err != nil {
		return err
	}
	rootfs := filepath.Join(dir, "rootfs")
	for _, p := range append([]string{RedisServer}, libs...) {
		if err := copyResolved(p, filepath.Join(rootfs, p)); err != nil {
			return err
		}
	}
	tmp := filepath.Join(rootfs, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o1777); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(redisDockerfile()), 0o644)
}

func redisDockerfile() string {
	quoted := make([]string, len(RedisArgs))
	for i, a := range RedisArgs {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	return fmt.Sprintf(`FROM scratch
COPY rootfs/ /
EXPOSE 6379
ENTRYPOINT [%q]
CMD [%s]
`, RedisServer, strings.Join(quoted, ", "))
}

// sharedLibraries returns the absolute paths ldd lists for bin, the dynamic
// loader included; the vDSO, which has no file, is left out.
func sharedLibraries(ctx context.Context, bin string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("ldd %s: %s", bin, line)
		}
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x…)" or "linux-vdso.so.1 (0x…)".
		if _, after, ok := strings.Cut(line, "=>"); ok {
			line = strings.TrimSpace(after)
		}
		path, _, _ := strings.Cut(line, " ")
		if filepath.IsAbs(path) {
			libs = append(libs, path)
		}
	}
	if len(libs) == 0 {
		return nil, errors.New("ldd " + bin + ": no libraries listed (a static binary needs no BuildRedis)")
	}
	return libs, sc.Err()
}

// copyResolved copies the file src names, following symlinks, to a regular
// file dst with the same permission bits, creating dst's directories.
func copyResolved(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
