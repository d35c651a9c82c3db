package fence_test

import (
	"context"
	"errors"
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
	for _, bad := range []string{"", "orders", "orders:", "orders:-1", "orders:01", "orders:x", "a b:1", "%3a:1", "%41:1", "%4:1", "a%:1", "orders:18446744073709551616", ":5"} {
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
		if errors.Is(tok.Check(), fence.ErrInvalidToken) {
			// An empty name with a Seq: Check rejects it, so must parse.
			if err == nil {
				t.Fatalf("ParseToken(%q) accepted a token that Check rejects", s)
			}
			return
		}
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
	f.Add(":5")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := fence.ParseToken(s)
		if err != nil {
			return
		}
		if tok.String() != s {
			t.Fatalf("ParseToken accepted a non-canonical form %q (canonical %q)", s, tok.String())
		}
		if err := tok.Check(); errors.Is(err, fence.ErrInvalidToken) {
			t.Fatalf("ParseToken(%q) accepted a token that Check rejects: %v", s, err)
		}
	})
}

// The conformance suite (fence/fencetest) covers Admit and Highest; this is
// what only MemoryGuard.Do promises.
func TestMemoryGuardDo(t *testing.T) {
	g := fence.NewMemoryGuard()
	wrote := 0
	write := func() error { wrote++; return nil }

	require.NoError(t, g.Do(fence.Token{Name: "x", Seq: 5}, write))
	assert.Equal(t, 1, wrote, "Do runs fn for a current token")
	assert.Equal(t, uint64(5), g.Highest("x"))

	err := g.Do(fence.Token{Name: "x", Seq: 3}, write)
	assert.ErrorIs(t, err, fence.ErrStaleToken)
	assert.ErrorIs(t, g.Do(fence.Token{Name: "x", Seq: 0}, write), fence.ErrNoToken)
	assert.ErrorIs(t, g.Do(fence.Token{Name: "", Seq: 9}, write), fence.ErrInvalidToken)
	assert.Equal(t, 1, wrote, "Do must not run fn for a rejected token")

	err = g.Do(fence.Token{Name: "x", Seq: 6}, func() error { return assert.AnError })
	assert.ErrorIs(t, err, assert.AnError, "fn's error is returned as is")
	assert.Equal(t, uint64(6), g.Highest("x"), "the mark is raised even if fn fails")
}

func TestContext(t *testing.T) {
	_, ok := fence.FromContext(context.Background())
	assert.False(t, ok)
	tok := fence.Token{Name: "a", Seq: 1}
	got, ok := fence.FromContext(fence.NewContext(context.Background(), tok))
	assert.True(t, ok)
	assert.Equal(t, tok, got)
}
