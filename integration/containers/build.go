package containers

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"time"

	"github.com/dlock-go/dlock/integration/etcdtest"
)

// EtcdImage is the official name the locally built etcd image is tagged
// with.
const EtcdImage = "gcr.io/etcd-development/etcd:v3.7.3"

// BuildTimeout bounds building the binary and the image.
const BuildTimeout = 5 * time.Minute

const etcdDockerfile = `FROM scratch
COPY etcd /usr/local/bin/etcd
EXPOSE 2379 2380
ENTRYPOINT ["/usr/local/bin/etcd"]
`

// BuildEtcd makes sure EtcdImage exists in the local Docker engine: if it
// is missing, it builds a static etcd (CGO_ENABLED=0) from this module and
// an image FROM scratch around it. It fails the test on error; the caller
// checks that Docker is available first.
func BuildEtcd(tb testing.TB) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), BuildTimeout)
	defer cancel()
	if exec.CommandContext(ctx, "docker", "image", "inspect", EtcdImage).Run() == nil {
		return EtcdImage
	}
	src, err := etcdtest.Source()
	if err != nil {
		tb.Fatalf("containers: %v", err)
	}
	dir := tb.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(dir, "etcd"), ".")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("containers: build static etcd: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(etcdDockerfile), 0o644); err != nil {
		tb.Fatalf("containers: %v", err)
	}
	if out, err := exec.CommandContext(ctx, "docker", "build", "-t", EtcdImage, dir).CombinedOutput(); err != nil {
		tb.Fatalf("containers: docker build %s: %v\n%s", EtcdImage, err, out)
	}
	return EtcdImage
}

// DockerAvailable reports whether a Docker engine answers, and why not.
func DockerAvailable() (bool, string) {
	if _, err := exec.LookPath("docker"); err != nil {
		return false, fmt.Sprintf("docker CLI not found: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		return false, fmt.Sprintf("docker info: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return true, ""
}
