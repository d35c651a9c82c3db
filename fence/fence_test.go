package fence_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/fence"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWireForm(t *testing.T) {
	cases := map[fence.Token]string{
		{Name: "orders", Seq: 42}:      "orders:42",
		{Name: "orders/eu-1", Seq: 7}:  "orders/eu-1:7",
		{Name: "a:b c", Seq: 1}:        "a%3Ab%20c:1",
		{Name: "", Seq: 0}:             ":0",
		{Name: "100%", Seq: 1<<64 - 1}: "100%25:18446744073709551615",
		{Name: "ünï", Seq: 3}:          "%C3%BCn%C3%AF:3",
	}
	for tok, want := range cases {
		assert.Equal(t, want, tok.String())
		got, err := fence.ParseToken(want)
		require.NoError(t, err, want)
		assert.Equal(t, tok, got)
	}
	for _, bad := range []string{"", "orders", "orders:", "orders:-1", "orders:01", "orders:x", "a b:1", "%3a:1", "%41:1", "%4:1", "a%:1", "orders:18446744073709551616"} {
		_, err := fence.ParseToken(bad)
		assert.ErrorIs(t, err, fence.ErrInvalidToken, "%q", bad)
	}
}

func FuzzTokenRoundTrip(f *testing.F) {
	f.Add("orders", uint64(42))
	f.Add("a:b%c d/e", uint64(0))
	f.Add("", uint64(1<<63))
	f.Fuzz(func(t *testing.T, name string, seq uint64) {
		tok := fence.Token{Name: name, Seq: seq}
		s := tok.String()
		got, err := fence.ParseToken(s)
		if err != nil {
			t.Fatalf("ParseToken(%q): %v", s, err)
		}
		if got != tok {
			t.Fatalf("round trip: %+v -> %q -> %+v", tok, s, got)
		}
	})
}

func FuzzParseToken(f *testing.F) {
	f.Add("orders:42")
	f.Add("a%3Ab:0")
	f.Add("%zz:1")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := fence.ParseToken(s)
		if err != nil {
			return
		}
		if tok.String() != s {
			t.Fatalf("ParseToken accepted a non-canonical form %q (canonical %q)", s, tok.String())
		}
	})
}

func TestMemoryGuard(t *testing.T) {
	ctx := t.Context()
	g := fence.NewMemoryGuard()
	require.NoError(t, g.Admit(ctx, fence.Token{Name: "x", Seq: 5}))
	require.NoError(t, g.Admit(ctx, fence.Token{Name: "x", Seq: 5}), "an equal token is admitted")
	require.NoError(t, g.Admit(ctx, fence.Token{Name: "y", Seq: 1}), "names are independent")
	err := g.Admit(ctx, fence.Token{Name: "x", Seq: 4})
	require.ErrorIs(t, err, fence.ErrStaleToken)
	var se *fence.StaleTokenError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, uint64(4), se.Seq)
	assert.Equal(t, uint64(5), se.Highest)
	assert.Contains(t, err.Error(), "4")
	assert.Contains(t, err.Error(), "5")
	assert.ErrorIs(t, g.Admit(ctx, fence.Token{Name: "x", Seq: 0}), fence.ErrNoToken)
	assert.ErrorIs(t, g.Admit(ctx, fence.Token{Name: "", Seq: 9}), fence.ErrInvalidToken)
	assert.Equal(t, uint64(5), g.Highest("x"))
	require.NoError(t, g.Admit(ctx, fence.Token{Name: "x", Seq: 6}))
	assert.Equal(t, uint64(6), g.Highest("x"))

	wrote := false
	err = g.Do(fence.Token{Name: "x", Seq: 3}, func() error { wrote = true; return nil })
	assert.ErrorIs(t, err, fence.ErrStaleToken)
	assert.False(t, wrote, "Do must not run fn for a stale token")
}

// 50 goroutines admit interleaved tokens: the high-water mark never
// decreases and no token lower than an admitted one is admitted after it.
func TestMemoryGuardConcurrent(t *testing.T) {
	g := fence.NewMemoryGuard()
	var (
		mu       sync.Mutex
		admitted []uint64 // in admission order (recorded under Do's lock)
	)
	var wg sync.WaitGroup
	for w := range 50 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range 200 {
				seq := uint64(r.IntN(1000) + 1)
				_ = g.Do(fence.Token{Name: "n", Seq: seq}, func() error {
					mu.Lock()
					admitted = append(admitted, seq)
					mu.Unlock()
					return nil
				})
			}
		})
	}
	wg.Wait()
	require.NotEmpty(t, admitted)
	for i := 1; i < len(admitted); i++ {
		require.GreaterOrEqual(t, admitted[i], admitted[i-1], "admission %d went backwards", i)
	}
	assert.Equal(t, admitted[len(admitted)-1], g.Highest("n"))
}

func TestContext(t *testing.T) {
	_, ok := fence.FromContext(context.Background())
	assert.False(t, ok)
	tok := fence.Token{Name: "a", Seq: 1}
	got, ok := fence.FromContext(fence.NewContext(context.Background(), tok))
	assert.True(t, ok)
	assert.Equal(t, tok, got)
}
