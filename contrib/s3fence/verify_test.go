package s3fence_test

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/contrib/s3fence"
	"github.com/dlock-go/dlock/contrib/s3fence/s3test"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/fencetest"
)

func names(checks []s3fence.Check) (passed []string, failed string) {
	for _, c := range checks {
		if c.Err != nil {
			failed = c.Name
			continue
		}
		passed = append(passed, c.Name)
	}
	return passed, failed
}

// versitygw passes every check, and the probe object is gone after.
func TestVerifyPassesOnVersitygw(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	checks, err := s3fence.Verify(ctx, e.client, e.bucket, s3fence.WithProbePrefix("probes/"))
	require.NoError(t, err)
	passed, failed := names(checks)
	assert.Equal(t, []string{"create", "metadata", "create-only", "compare-and-swap", "stale compare-and-swap", "refused writes left no trace"}, passed)
	assert.Empty(t, failed)
	for _, c := range checks {
		assert.NotEmpty(t, c.Expect, c.Name)
	}
	assert.Empty(t, list(t, e), "the probe object was deleted")
}

// A store that ignores conditions (a proxy that drops If-Match and
// If-None-Match and signs the request again) is refused by New, with an
// error that says what it did, and Verify shows which checks it passed.
func TestStoreIgnoringConditionsRefused(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	proxy := s3test.StartProxy(t, e.srv, s3test.ProxyConfig{Strip: s3test.ConditionHeaders})

	g, err := s3fence.New(ctx, proxy.Client(t), e.bucket)
	require.ErrorIs(t, err, s3fence.ErrUnsafeStore)
	assert.Nil(t, g)
	assert.ErrorContains(t, err, "a second PUT with If-None-Match: * on an existing key succeeded (want 412 Precondition Failed)")
	assert.ErrorContains(t, err, "cannot be fenced")
	t.Logf("New: %v", err)

	checks, err := s3fence.Verify(ctx, proxy.Client(t), e.bucket)
	require.ErrorIs(t, err, s3fence.ErrUnsafeStore)
	passed, failed := names(checks)
	assert.Equal(t, []string{"create", "metadata"}, passed)
	assert.Equal(t, "create-only", failed)
	assert.Empty(t, list(t, e), "the probe objects were deleted")
}

// A store that honours create-only writes but ignores If-Match fails at
// the deliberately stale compare-and-swap.
func TestStoreIgnoringIfMatchRefused(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	proxy := s3test.StartProxy(t, e.srv, s3test.ProxyConfig{Strip: []string{"If-Match"}})
	checks, err := s3fence.Verify(ctx, proxy.Client(t), e.bucket)
	require.ErrorIs(t, err, s3fence.ErrUnsafeStore)
	passed, failed := names(checks)
	assert.Equal(t, []string{"create", "metadata", "create-only", "compare-and-swap"}, passed)
	assert.Equal(t, "stale compare-and-swap", failed)
	assert.ErrorContains(t, err, "a PUT with If-Match on a stale ETag")
	assert.Empty(t, list(t, e))
}

// A store whose conditions hold one request at a time but not under
// concurrent writers (it checks, then writes) passes New's checks: they
// cannot tell. Concurrent fenced writes show it: some token lands after a
// higher one.
func TestNonAtomicStorePassesNewButNotALoad(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	proxy := s3test.StartProxy(t, e.srv, s3test.ProxyConfig{CheckThenWrite: 200 * time.Millisecond})
	g, err := s3fence.New(ctx, proxy.Client(t), e.bucket)
	require.NoError(t, err, "one request at a time the store is correct")

	// Violations: a token written once a higher one had been (late), and a
	// key that holds a lower token than one just written (lowered).
	var highest, late, lowered atomic.Uint64
	fencetest.Interleave(t, func(seq uint64) error {
		before := highest.Load()
		err := g.Put(ctx, fence.Token{Name: "racy", Seq: seq}, "racy", strings.NewReader(strconv.FormatUint(seq, 10)))
		if err != nil {
			return err
		}
		if seq < before {
			late.Add(1)
		}
		for h := highest.Load(); seq > h && !highest.CompareAndSwap(h, seq); h = highest.Load() {
		}
		if tok, err := g.Token(ctx, "racy"); err != nil {
			t.Error(err)
		} else if tok.Seq < seq {
			lowered.Add(1)
		}
		return nil
	})
	final, err := g.Token(ctx, "racy")
	require.NoError(t, err)
	assert.True(t, late.Load() > 0 || lowered.Load() > 0 || final.Seq != fencetest.Top,
		"no token landed after a higher one: the non-atomic store went unnoticed")
	t.Logf("written after a higher one: %d; lowered right after a write: %d; final token %d of %d", late.Load(), lowered.Load(), final.Seq, fencetest.Top)
}
