package main

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/contrib/s3fence/s3test"
	"github.com/dlock-go/dlock/fence"
)

// TestS3Store: the -guard s3 store on a real versitygw: Put's admissions
// and refusals, the read's token check, the control, and which failures
// are recorded unsent.
func TestS3Store(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := openTestS3(ctx, t)
	defer s.Close()
	const lock = "dlock-mutex"
	checkS3Register(ctx, t, s, lock)
	checkS3Control(ctx, t, s, lock)
	checkS3CutOff(ctx, t, s, lock)
}

// openTestS3 opens the -guard s3 store on a bucket of a new versitygw.
func openTestS3(ctx context.Context, t *testing.T) *s3Store {
	t.Helper()
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	u, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	dsn := func(host string) string {
		return (&url.URL{Scheme: "http", User: url.UserPassword(srv.AccessKey, srv.SecretKey), Host: host, Path: "/" + bucket}).String()
	}
	old := *guardDSN
	t.Cleanup(func() { *guardDSN = old })
	*guardDSN = dsn(u.Host)
	s, err := openS3(ctx, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkS3Register checks Put's admissions and refusals and the read's
// token check.
func checkS3Register(ctx context.Context, t *testing.T, s *s3Store, lock string) {
	t.Helper()
	if v, _, err, _ := s.read(ctx, lock, 5); err != nil || v != 0 {
		t.Fatalf("read of no object: %d, %v", v, err)
	}
	if err := s.write(ctx, lock, 5, 1); err != nil {
		t.Fatalf("write tok 5: %v", err)
	}
	if v, blind, err, _ := s.read(ctx, lock, 5); err != nil || v != 1 || blind {
		t.Fatalf("read tok 5: %d, blind %v, %v", v, blind, err)
	}
	if _, _, err, _ := s.read(ctx, lock, 4); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("read tok 4 after a write of 5: %v, want stale", err)
	}
	err := s.write(ctx, lock, 4, 9)
	if !errors.Is(err, fence.ErrStaleToken) || s.unsent(err) {
		t.Fatalf("write tok 4: %v (unsent %v), want stale", err, s.unsent(err))
	}
	if err := s.admit(ctx, lock, 4); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("admit tok 4: %v, want stale", err)
	}
	// A read does not raise: a lower token than the reader's still writes.
	if _, _, err, _ := s.read(ctx, lock, 7); err != nil {
		t.Fatal(err)
	}
	if err := s.write(ctx, lock, 6, 2); err != nil {
		t.Fatalf("write tok 6 after a read of 7: %v", err)
	}
	if err := s.plainWrite(ctx, lock, 3, 3); err != nil {
		t.Fatal(err)
	}
	if v, _, err, _ := s.read(ctx, lock, 3); err != nil || v != 3 {
		t.Fatalf("read after the plain write: %d, %v", v, err)
	}
}

// checkS3Control checks the control's reads and writes.
func checkS3Control(ctx context.Context, t *testing.T, s *s3Store, lock string) {
	t.Helper()
	if v, err := s.controlRead(ctx, lock); err != nil || v != 0 {
		t.Fatalf("control: %d, %v", v, err)
	}
	if err := s.controlWrite(ctx, lock, 42); err != nil {
		t.Fatal(err)
	}
	if v, err := s.controlRead(ctx, lock); err != nil || v != 42 {
		t.Fatalf("control: %d, %v", v, err)
	}
}

// checkS3CutOff checks which failures are recorded unsent: with the
// server cut off.
func checkS3CutOff(ctx context.Context, t *testing.T, s *s3Store, lock string) {
	t.Helper()
	// The server cut off (every dial refused): Put fails at its HEAD
	// and says nothing was written (unsent); so do the plain requests.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	s.tr.CloseIdleConnections()
	d := &net.Dialer{Timeout: time.Second}
	s.tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, dead)
	}
	err = s.write(ctx, lock, 8, 4)
	var nw *notWrittenError
	if !errors.As(err, &nw) || !s.unsent(err) {
		t.Fatalf("write with the server cut off: %v (unsent %v), want not written", err, s.unsent(err))
	}
	if _, err := s.controlRead(ctx, lock); err == nil || !s.unsent(err) {
		t.Fatalf("control read with the server cut off: %v (unsent %v)", err, s.unsent(err))
	}
	if !strings.HasPrefix(nw.Error(), "not written: ") {
		t.Errorf("notWrittenError: %q", nw.Error())
	}
}
