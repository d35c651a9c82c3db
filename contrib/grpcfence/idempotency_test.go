package grpcfence_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/dlock-go/dlock/contrib/grpcfence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/intent"
	"github.com/dlock-go/dlock/lock/locktest"
)

func TestClientSendsIdempotencyKey(t *testing.T) {
	for kind, call := range calls {
		t.Run(kind, func(t *testing.T) {
			c, rec := startServer(t, fence.NewMemoryGuard())
			tok := fence.Token{Name: "orders/42", Seq: 7}
			key := intent.Key("orders/42", "charge/order-42", 7)
			ctx := intent.NewContext(fence.NewContext(testCtx(t), tok), key)
			require.NoError(t, call(ctx, c))
			assert.Equal(t, []fence.Token{tok}, rec.seen())
			assert.Equal(t, [][]string{{key}}, rec.seenKeys())

			_, ok := metadata.FromOutgoingContext(ctx)
			assert.False(t, ok, "the caller's context is unchanged")
		})
	}
}

func TestClientSendsNoKeyWithoutOne(t *testing.T) {
	for kind, call := range calls {
		t.Run(kind, func(t *testing.T) {
			c, rec := startServer(t, fence.NewMemoryGuard())
			tok := fence.NewContext(testCtx(t), fence.Token{Name: "orders/42", Seq: 7})
			require.NoError(t, call(tok, c))
			require.NoError(t, call(intent.NewContext(tok, ""), c)) // an empty key is no key
			assert.Equal(t, [][]string{nil, nil}, rec.seenKeys())
		})
	}
}

// A service that checks no token still gets the key: that is what the
// intent journal relies on. A fenced service answers such a call
// InvalidArgument, as any call without a token.
func TestClientSendsKeyWithoutToken(t *testing.T) {
	for kind, call := range calls {
		t.Run(kind, func(t *testing.T) {
			key := intent.Key("orders/42", "charge/order-42", 7)
			ctx := intent.NewContext(testCtx(t), key)

			plain, rec := startServer(t, nil)
			require.NoError(t, call(ctx, plain))
			assert.Equal(t, [][]string{{key}}, rec.seenKeys())

			fenced, frec := startServer(t, fence.NewMemoryGuard())
			err := call(ctx, fenced)
			assert.Equal(t, codes.InvalidArgument, status.Code(err))
			assert.Empty(t, frec.seenKeys())
		})
	}
}

func TestClientKeepsCallersIdempotencyKey(t *testing.T) {
	for kind, call := range calls {
		t.Run(kind, func(t *testing.T) {
			c, rec := startServer(t, nil)
			ctx := intent.NewContext(testCtx(t), "from-the-context")
			appended := metadata.AppendToOutgoingContext(ctx, grpcfence.MetadataIdempotencyKey, "the-callers")
			require.NoError(t, call(appended, c))
			set := metadata.NewOutgoingContext(ctx, metadata.Pairs("Idempotency-Key", "set-by-the-caller", "other", "kept"))
			require.NoError(t, call(set, c))
			assert.Equal(t, [][]string{{"the-callers"}, {"set-by-the-caller"}}, rec.seenKeys())
		})
	}
}

// The value on the wire is the key byte for byte: no quotes, no escapes.
func TestIdempotencyKeyWireForm(t *testing.T) {
	c, rec := startServer(t, nil)
	keys := []string{
		intent.Key("orders/42", "charge/order-42", 7),
		"8e03978e-40d5-43e8-bc93-6894a57f9324",
		`a "quoted" \ key`,
		"~!#$%&'()*+,-./:;<=>?@[]^_`{|}",
	}
	for _, key := range keys {
		require.NoError(t, check(intent.NewContext(testCtx(t), key), c), "%q", key)
	}
	want := make([][]string, len(keys))
	for i, k := range keys {
		want[i] = []string{k}
	}
	assert.Equal(t, want, rec.seenKeys())
}

func TestClientRejectsInvalidKeyWithoutSending(t *testing.T) {
	for kind, call := range calls {
		t.Run(kind, func(t *testing.T) {
			c, rec := startServer(t, nil)
			for _, key := range []string{"line\nbreak", "tab\there", "caf\u00e9", "nul\x00", "del\x7f"} {
				assert.ErrorIs(t, call(intent.NewContext(testCtx(t), key), c), grpcfence.ErrInvalidKey, "%q", key)
			}
			assert.Empty(t, rec.seenKeys(), "nothing was sent")
		})
	}
}

// Journal.Do's fn gets a ctx with its key: through the interceptors, every
// attempt of one operation sends that key.
func TestJournalDoSendsItsKey(t *testing.T) {
	ctx := testCtx(t)
	c, rec := startServer(t, nil)
	held, err := locktest.NewMemory().Locker("orders/42").Lock(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, held.Unlock(context.Background())) })
	j := intent.New(intent.NewMemory())

	var keys []string
	attempt := 0
	charge := func(ctx context.Context, key string) error {
		keys = append(keys, key)
		if err := check(ctx, c); err != nil {
			return err
		}
		if attempt++; attempt == 1 {
			return status.Error(codes.DeadlineExceeded, "the first attempt's outcome is unknown")
		}
		return nil
	}
	assert.Error(t, j.Do(ctx, held, "charge/order-42", charge), "the first attempt leaves the intent open")
	require.NoError(t, j.Do(ctx, held, "charge/order-42", charge), "the retry")
	require.NoError(t, j.Do(ctx, held, "charge/order-42", charge), "recorded: fn is not called")

	require.Len(t, keys, 2)
	assert.Equal(t, intent.Key("orders/42", "charge/order-42", held.Token().Seq), keys[0])
	assert.Equal(t, [][]string{{keys[0]}, {keys[0]}}, rec.seenKeys())
}
