package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// oldEtcdVersion is the etcd release the stale-leader comparison runs: the
// last v3.5 before etcd stopped a deposed leader's lease revokes (etcd
// #15247; fixed by #16822, backported to v3.5.13 as #17425 and to v3.4.31
// as #17465).
const oldEtcdVersion = "v3.5.12"

// oldEtcdOmit are the harness's default member flags that oldEtcdVersion
// does not know: v3.5.12 has no flag for the entries kept for a slow
// follower's catch-up (it keeps 5000), and refuses a flag it does not know.
var oldEtcdOmit = []string{"--snapshot-catchup-entries"}

// oldEtcd returns an etcd server binary of oldEtcdVersion: $DLOCK_ETCD_OLD,
// or <user cache>/dlock/etcd-v3.5.12/etcd, built there on first use from
// the Go module proxy. The build is a throwaway module outside the
// repository (GOWORK=off) that requires go.etcd.io/etcd/server/v3 at that
// version and whose main calls its etcdmain.Main(os.Args), as etcd's own
// main does; go mod tidy there picks the dependencies v3.5.12 asks for.
func oldEtcd(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DLOCK_ETCD_OLD"); p != "" {
		return p
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "dlock", "etcd-"+oldEtcdVersion)
	bin := filepath.Join(dir, "etcd")
	if _, err := os.Stat(bin); err != nil {
		t.Logf("building etcd %s into %s (once: a minute or two)", oldEtcdVersion, bin)
		if err := buildOldEtcd(t, dir, bin); err != nil {
			t.Fatalf("etcd %s: %v (or set DLOCK_ETCD_OLD to an etcd %[1]s binary)", oldEtcdVersion, err)
		}
	}
	out, err := exec.CommandContext(t.Context(), bin, "--version").CombinedOutput()
	if want := "etcd Version: " + strings.TrimPrefix(oldEtcdVersion, "v"); err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("%s --version: %v, want %q in:\n%s", bin, err, want, out)
	}
	return bin
}

// buildOldEtcd builds etcd oldEtcdVersion into bin, through a temporary
// file renamed into place (test binaries may build at once).
func buildOldEtcd(t *testing.T, dir, bin string) error {
	src := t.TempDir()
	files := map[string]string{
		"go.mod": fmt.Sprintf("module dlock.test/etcd-old\n\ngo 1.21\n\nrequire go.etcd.io/etcd/server/v3 %s\n", oldEtcdVersion),
		"main.go": `// Command etcd is etcd's server, as etcd's own main starts it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
`,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "etcd-*.tmp")
	if err != nil {
		return err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	for _, args := range [][]string{{"mod", "tidy"}, {"build", "-o", tmp.Name(), "."}} {
		cmd := exec.CommandContext(t.Context(), "go", args...)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	return os.Rename(tmp.Name(), bin)
}
