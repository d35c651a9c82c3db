package s3fence_test

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/contrib/s3fence"
	"github.com/dlock-go/dlock/contrib/s3fence/s3test"
	"github.com/dlock-go/dlock/fence"
)

// versitygw's HEAD reads an object's metadata and then its ETag, each from
// the file current at that moment: under concurrent writes about one HEAD
// in a few hundred pairs one version's token with the next version's ETag.
// This test widens that window so that it always happens: a proxy answers
// one HEAD with the metadata of the version it found (token 5) and the ETag
// of the version that a higher token (9) wrote right after. A guard that
// trusted one HEAD would pass its check (6 >= 5) and its If-Match (the
// ETag is current), and overwrite token 9's object with token 6's.
func TestTornHeadIsNotTrusted(t *testing.T) {
	ctx := testCtx(t)
	e := newEnv(t)
	direct := e.guard(t)
	const key, name = "torn", "torn"
	require.NoError(t, direct.Put(ctx, fence.Token{Name: name, Seq: 5}, key, strings.NewReader("five")))

	var armed atomic.Bool
	proxy := s3test.StartProxy(t, e.srv, s3test.ProxyConfig{Wrap: func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method != http.MethodHead || !strings.HasSuffix(r.URL.Path, "/"+key) || !armed.CompareAndSwap(true, false) {
				return next.RoundTrip(r)
			}
			first, err := next.RoundTrip(r)
			if err != nil {
				return nil, err
			}
			if err := direct.Put(r.Context(), fence.Token{Name: name, Seq: 9}, key, strings.NewReader("nine")); err != nil {
				t.Errorf("the higher write: %v", err)
			}
			second, err := next.RoundTrip(r.Clone(r.Context())) // a HEAD has no body: the signed request can go again
			if err != nil {
				_ = first.Body.Close()
				return nil, err
			}
			_, _ = io.Copy(io.Discard, second.Body)
			_ = second.Body.Close()
			first.Header.Set("ETag", second.Header.Get("ETag"))
			return first, nil
		})
	}})
	victim, err := s3fence.New(ctx, proxy.Client(t), e.bucket)
	require.NoError(t, err)

	armed.Store(true)
	err = victim.Put(ctx, fence.Token{Name: name, Seq: 6}, key, strings.NewReader("six"))
	assert.False(t, armed.Load(), "the torn HEAD was served")
	var stale *fence.StaleTokenError
	require.ErrorAs(t, err, &stale, "token 6 after token 9 landed")
	assert.Equal(t, fence.StaleTokenError{Name: name, Seq: 6, Highest: 9}, *stale)
	tok, err := direct.Token(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, uint64(9), tok.Seq, "the object is token 9's")
	assert.Equal(t, "nine", get(t, e, key))
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
