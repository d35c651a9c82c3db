package s3test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/dlock-go/dlock/internal/testenv"
)

// Start starts a server for t alone and stops it with t.Cleanup. When
// versitygw cannot be had it skips t, or fails it under DLOCK_REQUIRE (see
// internal/testenv); any other startup failure fails t.
func Start(t testing.TB) *Server {
	t.Helper()
	return testenv.StartFor(t, "versitygw", ErrNotInstalled, StartServer)
}

// Client returns a client for s with its root credentials, path-style
// addressing and no shared config; optFns adjust its options further. Its
// idle connections are closed when t ends.
func (s *Server) Client(t testing.TB, optFns ...func(*s3.Options)) *s3.Client {
	t.Helper()
	return newClient(t, s.Endpoint, s.AccessKey, s.SecretKey, optFns...)
}

// NewBucket creates an empty bucket with a new name on s and returns the
// name. It fails t if the bucket cannot be created.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	name := s.nextBucket()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := s.Client(t).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("s3test: create bucket %s: %v", name, err)
	}
	return name
}

func newClient(t testing.TB, endpoint, access, secret string, optFns ...func(*s3.Options)) *s3.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	t.Cleanup(tr.CloseIdleConnections)
	opts := s3.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       Region,
		Credentials:  credentials.NewStaticCredentialsProvider(access, secret, ""),
		UsePathStyle: true,
		HTTPClient:   &http.Client{Transport: tr},
	}
	return s3.New(opts, optFns...)
}
