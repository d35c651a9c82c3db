package etcdtest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A build says what it builds and what it costs before it starts, once:
// the second call finds the cached binary and says nothing.
func TestBuildSaysSoOnce(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	var out bytes.Buffer
	old := progress
	progress = &out
	t.Cleanup(func() { progress = old })
	builds := 0
	build := func(path string) error {
		builds++
		assert.Contains(t, out.String(), "etcdtest: building etcd v9.9.9 from the Go module proxy into ",
			"the message comes before the build")
		return os.WriteFile(path, []byte("#!/bin/true\n"), 0o755)
	}
	path, err := buildCached("test key", "etcd v9.9.9 from the Go module proxy", build)
	require.NoError(t, err)
	assert.FileExists(t, path)
	assert.Contains(t, out.String(), "(once, ~2 min; later runs reuse it; $DLOCK_ETCD names a binary instead)")
	assert.Contains(t, out.String(), "etcdtest: built etcd v9.9.9 from the Go module proxy in ")
	out.Reset()
	again, err := buildCached("test key", "etcd v9.9.9 from the Go module proxy", build)
	require.NoError(t, err)
	assert.Equal(t, path, again)
	assert.Equal(t, 1, builds)
	assert.Empty(t, out.String(), "a cached binary is not announced")
	assert.Regexp(t, `^v3\.\d+\.\d+`, checkoutVersion(filepath.Join("..", "containers", "go.mod")))
	assert.Empty(t, checkoutVersion(filepath.Join("..", "..", "go.work")), "no etcd server there")
}
