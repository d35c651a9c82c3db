package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/dlock-go/dlock/contrib/s3fence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/cluster/s3obj"
)

// s3Store is the fenced register and the control in an S3 bucket
// (-guard s3), written through contrib/s3fence.
type s3Store struct {
	c      *s3.Client
	tr     *http.Transport
	bucket string
	guard  *s3fence.Guard
}

// openS3 connects to -guard-dsn, http://access:secret@host:port/bucket,
// and makes the guard (s3fence.New checks that the store honours
// conditional writes).
func openS3(ctx context.Context, ttl time.Duration) (*s3Store, error) {
	u, err := url.Parse(*guardDSN)
	if err != nil {
		return nil, fmt.Errorf("-guard-dsn: %w", err)
	}
	secret, _ := u.User.Password()
	bucket := strings.Trim(u.Path, "/")
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: time.Second}).DialContext
	c := s3.New(s3.Options{
		BaseEndpoint: aws.String(u.Scheme + "://" + u.Host),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider(u.User.Username(), secret, ""),
		UsePathStyle: true,
		HTTPClient:   &http.Client{Transport: tr, Timeout: ttl},
	})
	nctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	g, err := s3fence.New(nctx, c, bucket)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, err
	}
	return &s3Store{c: c, tr: tr, bucket: bucket, guard: g}, nil
}

func (s *s3Store) Close() { s.tr.CloseIdleConnections() }

func regKey(lock string) string { return "reg/" + lock }

// read is a plain GetObject of the register: one version, body and
// metadata together. The token it was written under is checked as Put
// would check it: a higher one refuses tok (stale). Nothing is raised.
func (s *s3Store) read(ctx context.Context, lock string, tok uint64) (int64, bool, error, error) {
	body, meta, err := s3obj.Get(ctx, s.c, s.bucket, regKey(lock), nil)
	if err != nil {
		return 0, false, err, nil
	}
	if body == "" {
		return 0, false, nil, nil
	}
	stored, v, err := parseReg(lock, body, meta)
	if err != nil {
		return 0, false, err, nil
	}
	if tok < stored {
		return 0, false, &fence.StaleTokenError{Name: lock, Seq: tok, Highest: stored}, nil
	}
	return v, false, nil, nil
}

// parseReg parses a register's body "<tok>:<v>" and checks that its
// metadata token, if any, is the same.
func parseReg(lock, body, meta string) (uint64, int64, error) {
	t, v, ok := strings.Cut(body, ":")
	tok, err1 := strconv.ParseUint(t, 10, 64)
	n, err2 := strconv.ParseInt(v, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("register %s holds %q", lock, body)
	}
	if meta != "" {
		mt, err := fence.ParseToken(meta)
		if err != nil || mt.Name != lock || mt.Seq != tok {
			return 0, 0, fmt.Errorf("register %s holds %q under token %q", lock, body, meta)
		}
	}
	return tok, n, nil
}

// write is Guard.Put. Put promises that an error other than an
// *OutcomeUnknownError means nothing was written (it failed before a
// PUT, or every PUT was answered with a refusal): such an error is
// recorded unsent, so that the guard checker holds s3fence to it (a
// version of the object with that write's token and value fails it).
func (s *s3Store) write(ctx context.Context, lock string, tok uint64, v int64) error {
	err := s.guard.Put(ctx, fence.Token{Name: lock, Seq: tok}, regKey(lock), strings.NewReader(fmt.Sprintf("%d:%d", tok, v)))
	if err != nil && !errors.Is(err, s3fence.ErrOutcomeUnknown) && !errors.Is(err, fence.ErrStaleToken) {
		return &notWrittenError{err}
	}
	return err
}

// notWrittenError is a Put that wrote nothing, by s3fence's word.
type notWrittenError struct{ err error }

func (e *notWrittenError) Error() string { return "not written: " + e.err.Error() }
func (e *notWrittenError) Unwrap() error { return e.err }

// admit is the check alone (for the plant): the register's token, read
// with s3fence's Token, against tok.
func (s *s3Store) admit(ctx context.Context, lock string, tok uint64) error {
	stored, err := s.guard.Token(ctx, regKey(lock))
	if err != nil {
		return err
	}
	if tok < stored.Seq {
		return &fence.StaleTokenError{Name: lock, Seq: tok, Highest: stored.Seq}
	}
	return nil
}

// plainWrite writes the register as Put would, token metadata and all,
// but unconditionally.
func (s *s3Store) plainWrite(ctx context.Context, lock string, tok uint64, v int64) error {
	_, err := s.c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.bucket), Key: aws.String(regKey(lock)),
		Body:     strings.NewReader(fmt.Sprintf("%d:%d", tok, v)),
		Metadata: map[string]string{s3fence.MetaToken: fence.Token{Name: lock, Seq: tok}.String()},
	})
	return err
}

func (s *s3Store) controlRead(ctx context.Context, lock string) (int64, error) {
	body, _, err := s3obj.Get(ctx, s.c, s.bucket, "ctl/"+lock, nil)
	if err != nil || body == "" {
		return 0, err
	}
	return strconv.ParseInt(body, 10, 64)
}

func (s *s3Store) controlWrite(ctx context.Context, lock string, v int64) error {
	_, err := s.c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.bucket), Key: aws.String("ctl/" + lock),
		Body: strings.NewReader(strconv.FormatInt(v, 10)),
	})
	return err
}

func (s *s3Store) control() bool { return true }

// raises: false. A read changes nothing at the store: a lower token
// than the reader's can still write until a write under the reader's
// token lands.
func (s *s3Store) raises() bool { return false }

// unsent: a Put that wrote nothing (notWrittenError), or a request
// whose dial failed.
func (s *s3Store) unsent(err error) bool {
	var nw *notWrittenError
	if errors.As(err, &nw) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && !errors.Is(err, s3fence.ErrOutcomeUnknown)
}
