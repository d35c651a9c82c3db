package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/mod/modfile"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/integration/pgtest"
	"github.com/dlock-go/dlock/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The modules a user imports: the core and every guard.
var libraries = []string{
	Root,
	Root + "/contrib/grpcfence",
	Root + "/contrib/httpfence",
	Root + "/contrib/pgfence",
	Root + "/contrib/redisfence",
	Root + "/contrib/s3fence",
}

// repoRoot returns the repository's root: the directory above the test's
// that holds go.work.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, "go.work"))
	require.NoError(t, err, "the release check runs in a checkout")
	return dir
}

// pinned returns the version every module requires the core at.
func pinned(t *testing.T, root string) string {
	t.Helper()
	file := filepath.Join(root, "contrib", "cmd", "dlock", "go.mod")
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	f, err := modfile.Parse(file, data, nil)
	require.NoError(t, err)
	for _, r := range f.Require {
		if r.Mod.Path == Root {
			return r.Mod.Version
		}
	}
	t.Fatalf("%s does not require %s", file, Root)
	return ""
}

// TestTreeIsPinned: the tree is kept as Pin leaves it (no replace in any
// go.mod, every module requiring the others at one version, go.work
// replacing them), so that what is tagged is what the release check
// checks.
func TestTreeIsPinned(t *testing.T) {
	root := repoRoot(t)
	version := pinned(t, root)
	copyDir := t.TempDir()
	require.NoError(t, copyTree(root, copyDir))
	require.NoError(t, Pin(copyDir, version))
	mods, err := Modules(root)
	require.NoError(t, err)
	for _, file := range append([]string{"go.work"}, goMods(mods)...) {
		want, err := os.ReadFile(filepath.Join(root, file))
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(copyDir, file))
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), "%s is not pinned at %s: run go run ./integration/release pin %s", file, version, version)
	}
}

func goMods(mods []Module) []string {
	var files []string
	for _, m := range mods {
		files = append(files, filepath.Join(m.Dir, "go.mod"))
	}
	return files
}

// TestPinRefusesTestOnlyRequirement: a published module may not require a
// module under integration/ (its users would inherit it).
func TestPinRefusesTestOnlyRequirement(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, data string) {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(rel)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, rel), []byte(data), 0o644))
	}
	write("go.mod", "module "+Root+"\n\ngo 1.26\n")
	write("integration/pgtest/go.mod", "module "+Root+"/integration/pgtest\n\ngo 1.26\n")
	write("contrib/pgfence/go.mod", "module "+Root+"/contrib/pgfence\n\ngo 1.26\n\nrequire "+Root+"/integration/pgtest v0.0.0-00010101000000-000000000000\n")
	err := Pin(dir, "v0.1.0")
	assert.ErrorContains(t, err, "contrib/pgfence requires "+Root+"/integration/pgtest, which is not published")
}

// goEnv is the environment of a user outside this repository who has only
// the module proxy at out (ahead of the public one): no workspace, a
// module cache of its own (the machine's is read through as a proxy, so
// nothing is downloaded twice), and no checksum database for dlock's own
// modules, which it has never seen.
func goEnv(t *testing.T, out string) (env []string, home string) {
	t.Helper()
	goenv := func(name string) string {
		b, err := exec.Command("go", "env", name).Output()
		require.NoError(t, err)
		return strings.TrimSpace(string(b))
	}
	proxy := "file://" + out
	if cache := goenv("GOMODCACHE"); cache != "" {
		if _, err := os.Stat(filepath.Join(cache, "cache", "download")); err == nil {
			proxy += ",file://" + filepath.Join(cache, "cache", "download")
		}
	}
	proxy += "," + goenv("GOPROXY")
	home = t.TempDir()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "GO") || strings.HasPrefix(k, "DLOCK_") || k == "HOME" || k == "XDG_CACHE_HOME" {
			continue
		}
		env = append(env, kv)
	}
	return append(env,
		"HOME="+home,
		"XDG_CACHE_HOME="+filepath.Join(home, ".cache"), // etcdtest builds its etcd anew
		"GOCACHE="+goenv("GOCACHE"),                     // but compiled packages are reused
		"GOMODCACHE="+filepath.Join(home, "go", "pkg", "mod"),
		"GOPATH="+filepath.Join(home, "go"),
		"GOBIN="+filepath.Join(home, "bin"),
		"GOPROXY="+proxy,
		"GONOSUMDB="+Root,
		"GOFLAGS=-modcacherw",
		"GOWORK=off",
		"GOTOOLCHAIN=local",
	), home
}

// gorun runs name with args in dir under env and returns its output; it
// fails t if the command fails.
func gorun(t *testing.T, ctx context.Context, env []string, dir, name string, args ...string) string {
	t.Helper()
	out, err := command(ctx, env, dir, name, args...)
	require.NoError(t, err, "%s %s in %s:\n%s", name, strings.Join(args, " "), dir, out)
	return out
}

func command(ctx context.Context, env []string, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestRelease is the release check (docs/release.md): every published
// module, made from this tree as a release would tag it, is put in a
// module proxy on disk; then, as a user with only that proxy and the
// public one, it installs the CLI with the README's command and runs its
// demo, and builds a module of its own that uses the core and every guard,
// compiles and runs the README's code, and runs docs/testing.md's example
// (real etcd in a user's test, with no environment variable set).
func TestRelease(t *testing.T) {
	testenv.SkipUnlessLong(t, "~5 min: builds the CLI and etcd from a module proxy of this tree")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	root := repoRoot(t)
	version := pinned(t, root)
	out := t.TempDir()
	published, err := Proxy(root, version, out)
	require.NoError(t, err)
	t.Logf("proxy at %s: %d modules at %s", out, len(published), version)
	env, home := goEnv(t, out)

	t.Run("install", func(t *testing.T) {
		// The README's Install line, as it stands.
		gorun(t, ctx, env, home, "go", "install", Root+"/contrib/cmd/dlock@latest")
		bin := filepath.Join(home, "bin", "dlock")
		v := gorun(t, ctx, env, home, bin, "version")
		t.Logf("dlock version: %s", v)
		assert.Regexp(t, `^dlock `+regexp.QuoteMeta(version)+`\b`, v)
		demo := gorun(t, ctx, env, home, bin, "demo")
		assert.Contains(t, demo, "write REJECTED")
	})

	t.Run("consumer", func(t *testing.T) {
		dir := filepath.Join(home, "consumer")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		gorun(t, ctx, env, dir, "go", "mod", "init", "example.com/consumer")
		gets := []string{"get"}
		for _, m := range libraries {
			gets = append(gets, m+"@"+version)
		}
		gorun(t, ctx, env, dir, "go", gets...)
		readme := writeSnippets(t, filepath.Join(root, "README.md"), dir, "readme")
		writeSnippets(t, filepath.Join(root, "docs", "testing.md"), dir, "testing")
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "guards"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "guards", "guards.go"), []byte(guardsSource), 0o644))
		gorun(t, ctx, env, dir, "go", "mod", "tidy")
		gorun(t, ctx, env, dir, "go", "vet", "./...")
		require.NotEmpty(t, readme)

		// docs/testing.md's example: etcd built from the module proxy
		// into an empty user cache.
		test := gorun(t, ctx, env, dir, "go", "test", "-count=1", "-v", "./testing1/...")
		assert.Contains(t, test, "granted with token")

		// The README's program, as a user runs it.
		bin := filepath.Join(home, "bin", "readme")
		gorun(t, ctx, env, dir, "go", "build", "-o", bin, "./"+readme[0])
		t.Run("unreachable", func(t *testing.T) {
			// The README opens before it defers Close: a failed Open is
			// an error, not a nil Client's panic.
			out, err := command(ctx, append(env, "DLOCK_DSN=etcd://127.0.0.1:1/myapp?dial_timeout=2s", "DATABASE_URL=postgres://127.0.0.1:1/x"), home, bin)
			require.Error(t, err, out)
			t.Logf("the README program with an unreachable DSN: %v\n%s", err, out)
			assert.Contains(t, out, "127.0.0.1:1")
			assert.NotContains(t, out, "panic")
		})
		t.Run("works", func(t *testing.T) {
			etcd := etcdtest.New(t)
			pg := pgtest.Start(t)
			dsn := pg.NewDatabase(t)
			db := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
			_, err := pg.Query(ctx, db, "CREATE TABLE invoices (id int PRIMARY KEY, state text); INSERT INTO invoices VALUES (42, 'open')")
			require.NoError(t, err)
			out := gorun(t, ctx, append(env, "DLOCK_DSN=etcd://"+strings.Join(etcd.HostPorts(), ",")+"/myapp", "DATABASE_URL="+dsn), home, bin)
			state, err := pg.Query(ctx, db, "SELECT state FROM invoices WHERE id = 42")
			require.NoError(t, err)
			assert.Equal(t, "sent", state, out)
			fences, err := pg.Query(ctx, db, "SELECT count(*) FROM dlock_fences")
			require.NoError(t, err)
			assert.Equal(t, "1", fences, "the write went through the fence")
		})
	})
}

// writeSnippets writes each ```go block of the Markdown file md as a
// package of its own, dir/<prefix><n>, and returns their directories'
// names: a block with a Test function as x_test.go, any other as main.go.
// Every block must be a whole file.
func writeSnippets(t *testing.T, md, dir, prefix string) []string {
	t.Helper()
	data, err := os.ReadFile(md)
	require.NoError(t, err)
	var pkgs []string
	for i, block := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(data), -1) {
		src := block[1]
		require.True(t, strings.HasPrefix(src, "package "), "%s: Go block %d is not a whole file (it must start with package): a snippet the user can paste", md, i+1)
		name := fmt.Sprintf("%s%d", prefix, i+1)
		file := "main.go"
		if strings.Contains(src, "func Test") {
			file = "x_test.go"
		}
		require.NoError(t, os.MkdirAll(filepath.Join(dir, name), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name, file), []byte(src), 0o644))
		pkgs = append(pkgs, name)
	}
	return pkgs
}

// guardsSource uses the core and every guard, as a user's program would.
const guardsSource = `package guards

import (
	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/contrib/grpcfence"
	"github.com/dlock-go/dlock/contrib/httpfence"
	"github.com/dlock-go/dlock/contrib/pgfence"
	"github.com/dlock-go/dlock/contrib/redisfence"
	"github.com/dlock-go/dlock/contrib/s3fence"
)

var (
	_ = dlock.Open
	_ = grpcfence.UnaryServerInterceptor
	_ = httpfence.Middleware
	_ = pgfence.New
	_ = redisfence.New
	_ = s3fence.New
)
`
