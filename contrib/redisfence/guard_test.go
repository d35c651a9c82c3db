package redisfence_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/contrib/redisfence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/fencetest"
)

var _ fence.Guard = (*redisfence.Guard)(nil)

func TestNewValidates(t *testing.T) {
	_, err := redisfence.New(nil)
	require.ErrorIs(t, err, redisfence.ErrInvalidOption)
	assert.ErrorContains(t, err, "client is nil")

	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	_, err = redisfence.New(c, redisfence.WithPrefix(""))
	require.ErrorIs(t, err, redisfence.ErrInvalidOption)
	assert.ErrorContains(t, err, "WithPrefix")

	g, err := redisfence.New(c)
	require.NoError(t, err)
	assert.Equal(t, redisfence.DefaultPrefix+"orders/eu", g.Key("orders/eu"))
	g, err = redisfence.New(c, redisfence.WithPrefix("{orders}:fence:"))
	require.NoError(t, err)
	assert.Equal(t, "{orders}:fence:orders", g.Key("orders"))
}

// The suite (fence/fencetest) checks the marks; Redis must also keep them
// forever.
func TestFenceKeysNeverExpire(t *testing.T) {
	ctx := testCtx(t)
	g, client := newGuard(t)
	require.NoError(t, g.Admit(ctx, fence.Token{Name: "orders", Seq: 5}))
	require.NoError(t, g.Set(ctx, fence.Token{Name: "cfg", Seq: 5}, "cfg:value", "five", time.Hour))
	for _, name := range []string{"orders", "cfg"} {
		ttl, err := client.TTL(ctx, g.Key(name)).Result()
		require.NoError(t, err)
		assert.Equal(t, time.Duration(-1), ttl, "the fence key of %q has no expiry", name)
	}
}

// The suite checks Admit with the bad tokens; Set must reject them too, and
// write nothing.
func TestSetRejectsBadTokens(t *testing.T) {
	ctx := testCtx(t)
	g, client := newGuard(t)
	for _, b := range fencetest.BadTokens {
		assert.ErrorIs(t, g.Set(ctx, b.Token, "data", "v", 0), b.Want, "Set(%#v)", b.Token)
	}
	n, err := client.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "nothing was written")
}

func TestSetWritesOnlyWithCurrentToken(t *testing.T) {
	ctx := testCtx(t)
	g, client := newGuard(t)

	require.NoError(t, g.Set(ctx, fence.Token{Name: "cfg", Seq: 5}, "cfg:value", "five", 0))
	require.NoError(t, g.Set(ctx, fence.Token{Name: "cfg", Seq: 5}, "cfg:value", "five again", 0))
	err := g.Set(ctx, fence.Token{Name: "cfg", Seq: 4}, "cfg:value", "four", 0)
	var stale *fence.StaleTokenError
	require.ErrorAs(t, err, &stale)
	assert.Equal(t, uint64(5), stale.Highest)
	assert.Equal(t, "five again", client.Get(ctx, "cfg:value").Val(), "the stale write did not happen")

	require.NoError(t, g.Admit(ctx, fence.Token{Name: "cfg", Seq: 6}))
	assert.ErrorIs(t, g.Set(ctx, fence.Token{Name: "cfg", Seq: 5}, "cfg:value", "five late", 0), fence.ErrStaleToken,
		"Admit raised the mark that Set checks")
	assert.Equal(t, "five again", client.Get(ctx, "cfg:value").Val())

	require.NoError(t, g.Set(ctx, fence.Token{Name: "cfg", Seq: 7}, "cfg:tmp", []byte("bytes"), time.Hour))
	pttl, err := client.PTTL(ctx, "cfg:tmp").Result()
	require.NoError(t, err)
	assert.Positive(t, pttl)
	assert.LessOrEqual(t, pttl, time.Hour)
	require.NoError(t, g.Set(ctx, fence.Token{Name: "cfg", Seq: 7}, "cfg:tiny", 42, time.Microsecond))
	assert.Equal(t, uint64(7), mustHighest(t, g, "cfg"))
}

func TestSetValidatesArguments(t *testing.T) {
	ctx := testCtx(t)
	g, client := newGuard(t)
	tok := fence.Token{Name: "cfg", Seq: 1}
	for _, c := range []struct {
		key  string
		exp  time.Duration
		want string
	}{
		{"", 0, "key is empty"},
		{g.Key("cfg"), 0, "fence key"},
		{"data", -time.Second, "negative expiration"},
	} {
		err := g.Set(ctx, tok, c.key, "v", c.exp)
		assert.ErrorIs(t, err, redisfence.ErrInvalidOption)
		assert.ErrorContains(t, err, c.want)
	}
	n, err := client.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n)
}

func TestCorruptMarkIsReportedNotAdmitted(t *testing.T) {
	ctx := testCtx(t)
	g, client := newGuard(t)
	for _, junk := range []string{"banana", "007", "-3", "0", ""} {
		require.NoError(t, client.Set(ctx, g.Key("x"), junk, 0).Err())
		err := g.Admit(ctx, fence.Token{Name: "x", Seq: 1 << 62})
		assert.ErrorIs(t, err, redisfence.ErrCorruptMark, "%q", junk)
		assert.NotErrorIs(t, err, fence.ErrStaleToken)
		assert.ErrorIs(t, g.Set(ctx, fence.Token{Name: "x", Seq: 1 << 62}, "data", "v", 0), redisfence.ErrCorruptMark)
		_, err = g.Highest(ctx, "x")
		assert.ErrorIs(t, err, redisfence.ErrCorruptMark)
		assert.Equal(t, junk, client.Get(ctx, g.Key("x")).Val(), "left as it was")
	}
	assert.Zero(t, client.Exists(ctx, "data").Val())
}

// The seed's timeline against Redis: A (token N) writes and pauses, B (N+1)
// writes, A's late write with N is rejected and B's value stands.
func TestSeedTimeline(t *testing.T) {
	ctx := testCtx(t)
	g, client := newGuard(t)
	a := fence.Token{Name: "accounts/7", Seq: 41}
	b := fence.Token{Name: "accounts/7", Seq: 42}

	require.NoError(t, g.Set(ctx, a, "accounts/7:owner", "A", 0))
	require.NoError(t, g.Set(ctx, b, "accounts/7:owner", "B", 0))
	err := g.Set(ctx, a, "accounts/7:owner", "A after the pause", 0)
	var stale *fence.StaleTokenError
	require.ErrorAs(t, err, &stale)
	assert.Equal(t, fence.StaleTokenError{Name: "accounts/7", Seq: 41, Highest: 42}, *stale)
	assert.Equal(t, "B", client.Get(ctx, "accounts/7:owner").Val())

	// Control: the same late write without the guard overwrites B.
	require.NoError(t, client.Set(ctx, "accounts/7:owner", "A after the pause", 0).Err())
	assert.Equal(t, "A after the pause", client.Get(ctx, "accounts/7:owner").Val())
}

func mustHighest(t *testing.T, g *redisfence.Guard, name string) uint64 {
	t.Helper()
	h, err := g.Highest(testCtx(t), name)
	require.NoError(t, err)
	return h
}
