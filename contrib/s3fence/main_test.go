package s3fence_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/contrib/s3fence"
	"github.com/dlock-go/dlock/contrib/s3fence/s3test"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testCtx bounds one test.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// env is a versitygw server with a fresh bucket, and a client for it.
type env struct {
	srv    *s3test.Server
	client *s3.Client
	bucket string
}

func newEnv(t *testing.T) env {
	t.Helper()
	srv := s3test.Start(t)
	return env{srv: srv, client: srv.Client(t), bucket: srv.NewBucket(t)}
}

// guard returns a Guard on e's bucket.
func (e env) guard(t *testing.T, opts ...s3fence.Option) *s3fence.Guard {
	t.Helper()
	g, err := s3fence.New(testCtx(t), e.client, e.bucket, opts...)
	require.NoError(t, err)
	return g
}

// get returns the content of key.
func get(t *testing.T, e env, key string) string {
	t.Helper()
	out, err := e.client.GetObject(testCtx(t), &s3.GetObjectInput{Bucket: aws.String(e.bucket), Key: aws.String(key)})
	require.NoError(t, err)
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	require.NoError(t, err)
	return string(b)
}

// noRetries turns off the SDK's own retries, so that a test sees each PUT
// that Put makes.
func noRetries(o *s3.Options) { o.RetryMaxAttempts = 1 }
