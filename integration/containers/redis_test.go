package containers

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRedisContext: the build context holds the server, its loader and
// libraries as regular files at the paths ldd prints, an empty /tmp, and a
// Dockerfile with the server as entrypoint.
func TestRedisContext(t *testing.T) {
	if _, err := os.Stat(RedisServer); err != nil {
		testenv.Missing(t, "redis", err.Error())
	}
	dir := t.TempDir()
	require.NoError(t, redisContext(t.Context(), dir))
	libs, err := sharedLibraries(t.Context(), RedisServer)
	require.NoError(t, err)
	if runtime.GOARCH == "amd64" {
		assert.Contains(t, libs, "/lib64/ld-linux-x86-64.so.2", "the dynamic loader")
	}
	for _, p := range append([]string{RedisServer}, libs...) {
		fi, err := os.Lstat(filepath.Join(dir, "rootfs", p))
		if assert.NoError(t, err, p) {
			assert.True(t, fi.Mode().IsRegular(), "%s is a regular file", p)
		}
	}
	tmp, err := os.ReadDir(filepath.Join(dir, "rootfs", "tmp"))
	require.NoError(t, err)
	assert.Empty(t, tmp)
	df, err := os.ReadFile(filepath.Join(dir, "Dockerfile"))
	require.NoError(t, err)
	assert.Contains(t, string(df), `ENTRYPOINT ["/usr/bin/redis-server"]`)
	assert.Contains(t, string(df), `"--save", ""`)
}
