package s3fence

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/telemetry"
)

// The user metadata that Put writes with every object (S3 sends them as
// x-amz-meta-dlock-token and x-amz-meta-dlock-write-id).
const (
	// MetaToken holds the wire form of the token the object was written
	// under (fence.Token.String).
	MetaToken = "dlock-token"
	// MetaWriteID holds the ID of the write that stored the object, unique
	// per Put.
	MetaWriteID = "dlock-write-id"
)

// maxBackoff bounds the pause before a retry after a 409 or a write whose
// outcome is unknown.
const maxBackoff = time.Second

// Guard fences writes to the objects of one bucket: Put writes an object
// only if it was not written under a higher token since Put read it. It is
// safe for concurrent use; it holds no state of its own (the tokens live
// in the objects' metadata), so any number of Guards, in any number of
// processes, may write the same keys. The zero value is not usable; call
// New.
type Guard struct {
	client *s3.Client
	bucket string
	o      options
	tel    *telemetry.Fence
}

// New returns a Guard for bucket, after checking that the store honours
// conditional writes (see Verify: among other checks, a deliberately stale
// conditional write must fail with 412). It returns an error matching
// ErrUnsafeStore for a store that does not, and ErrInvalidArgument for a
// nil client, an empty bucket or a bad option. The check writes one probe
// object under the probe prefix (WithProbePrefix) and deletes it.
func New(ctx context.Context, client *s3.Client, bucket string, opts ...Option) (*Guard, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: client is nil", ErrInvalidArgument)
	}
	if bucket == "" {
		return nil, fmt.Errorf("%w: bucket is empty", ErrInvalidArgument)
	}
	o, err := apply(opts)
	if err != nil {
		return nil, err
	}
	if _, err := verify(ctx, client, bucket, o); err != nil {
		return nil, err
	}
	return &Guard{client: client, bucket: bucket, o: o, tel: telemetry.NewFence("s3", o.tel)}, nil
}

// Bucket returns the bucket the guard writes to.
func (g *Guard) Bucket() string { return g.bucket }

// Put writes body to key, with t in the object's own metadata (MetaToken),
// conditional on the object not having been written under a higher token
// since Put read it.
//
// Put reads the object's metadata, refuses t if the stored token is higher
// (a *fence.StaleTokenError, matching fence.ErrStaleToken, with the stored
// Seq as Highest) or belongs to another lock name (ErrOtherLock), and then
// PUTs the object with If-Match on the ETag it read (If-None-Match: * if
// there was no object), so that the check and the write are one atomic
// step at the store. When another write lands in between (412, or 409
// ConditionalRequestConflict) it reads again and retries, up to
// WithMaxAttempts PUTs (then ErrContended).
//
// An equal token is admitted: one holder may write a key many times. A
// token with Seq 0 is rejected with fence.ErrNoToken, one with an empty
// Name with fence.ErrInvalidToken, before anything is read. A body that is
// the object's current content under another token is refused with
// ErrSameContent (see the package documentation). An object without token
// metadata (written outside the guard) is overwritten as if its token were
// Seq 0.
//
// An io.ReadSeeker body is read from its current offset to its end, once
// to hash it and again by each PUT; any other body is read into memory
// first. Every PUT carries a write ID (MetaWriteID): when a PUT times out
// (WithAttemptTimeout) or fails in transit, Put reads the object to tell
// whether it landed. When ctx ends while a PUT may have reached the store,
// Put returns an *OutcomeUnknownError (matching ErrOutcomeUnknown and
// ctx.Err()) with the write ID, for Landed.
func (g *Guard) Put(ctx context.Context, t fence.Token, key string, body io.Reader) error {
	if err := t.Check(); err != nil {
		return err
	}
	if key == "" {
		return fmt.Errorf("%w: Put: key is empty", ErrInvalidArgument)
	}
	return g.tel.Write(ctx, t, func(ctx context.Context) error {
		return g.put(ctx, t, key, body)
	})
}

func (g *Guard) put(ctx context.Context, t fence.Token, key string, body io.Reader) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("s3fence: put %q: %w", key, err)
	}
	p, err := newPayload(body)
	if err != nil {
		return fmt.Errorf("s3fence: put %q: %w", key, err)
	}
	writeID := newWriteID()
	// unknown is set once a PUT may have reached the store without an
	// answer: from then on, every way out but success says so.
	var unknown, last error
	outcome := func(err error) error {
		if unknown == nil {
			return err
		}
		return &OutcomeUnknownError{Key: key, WriteID: writeID, Err: err}
	}
	backoffs := 0
	for range g.o.maxAttempts {
		cur, err := g.read(ctx, key)
		if err != nil {
			if ctx.Err() != nil {
				err = ctxError(ctx, err)
			}
			return outcome(fmt.Errorf("s3fence: put %q: read: %w", key, err))
		}
		if cur.writeID == writeID {
			return nil // an earlier PUT of this Put landed
		}
		if err := admit(t, key, cur); err != nil {
			return outcome(err)
		}
		if cur.exists && cur.token.Seq != t.Seq && sameContent(cur.etag, p.md5) {
			return outcome(fmt.Errorf("%w: key %q holds this content (ETag %s) under token %v; %v would leave the ETag unchanged",
				ErrSameContent, key, cur.etag, cur.token, t))
		}
		in := &s3.PutObjectInput{
			Bucket:        aws.String(g.bucket),
			Key:           aws.String(key),
			ContentLength: aws.Int64(p.size),
			Metadata:      map[string]string{MetaToken: t.String(), MetaWriteID: writeID},
		}
		if cur.exists {
			in.IfMatch = aws.String(cur.etag)
		} else {
			in.IfNoneMatch = aws.String("*")
		}
		err = g.putOnce(ctx, in, p)
		if err == nil {
			return nil
		}
		last = err
		switch classify(err) {
		case raced:
			continue // someone else's write landed: read again
		case definite:
			return outcome(fmt.Errorf("s3fence: put %q: %w", key, err))
		case inTransit:
			unknown = err
			if ctx.Err() != nil {
				return outcome(ctxError(ctx, err))
			}
		case conflicted:
		}
		backoffs++
		if err := sleep(ctx, backoff(backoffs)); err != nil {
			return outcome(fmt.Errorf("s3fence: put %q: %w", key, err))
		}
	}
	if unknown != nil {
		return outcome(fmt.Errorf("s3fence: put %q: gave up after %d attempts: %w", key, g.o.maxAttempts, last))
	}
	return fmt.Errorf("%w: put %q: gave up after %d attempts, each refused because another write landed first (last: %v)",
		ErrContended, key, g.o.maxAttempts, last)
}

// putOnce makes one PUT, bounded by WithAttemptTimeout.
func (g *Guard) putOnce(ctx context.Context, in *s3.PutObjectInput, p *payload) error {
	body := p.attempt()
	defer body.finish()
	in.Body = body
	if g.o.attemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.o.attemptTimeout)
		defer cancel()
	}
	_, err := g.client.PutObject(ctx, in)
	return err
}

// Token returns the token that last wrote key: Seq 0 if the object does
// not exist or carries no token (it was written outside the guard), an
// error matching ErrCorruptToken if its token metadata is malformed.
func (g *Guard) Token(ctx context.Context, key string) (fence.Token, error) {
	if key == "" {
		return fence.Token{}, fmt.Errorf("%w: Token: key is empty", ErrInvalidArgument)
	}
	cur, err := g.head(ctx, key)
	if err != nil {
		return fence.Token{}, fmt.Errorf("s3fence: token %q: %w", key, err)
	}
	if cur.tokenErr != nil {
		return fence.Token{}, cur.tokenErr
	}
	return cur.token, nil
}

// Landed reports whether the current version of key was stored by the
// write with ID writeID (from an *OutcomeUnknownError). false means that
// write has not landed, or landed and was overwritten since; a PUT still
// in flight can land later, until another write changes key.
func (g *Guard) Landed(ctx context.Context, key, writeID string) (bool, error) {
	if key == "" || writeID == "" {
		return false, fmt.Errorf("%w: Landed: key and writeID must not be empty", ErrInvalidArgument)
	}
	cur, err := g.head(ctx, key)
	if err != nil {
		return false, fmt.Errorf("s3fence: landed %q: %w", key, err)
	}
	return cur.writeID == writeID, nil
}

// object is what a HEAD tells about a key.
type object struct {
	exists   bool
	etag     string
	token    fence.Token // zero if none
	tokenErr error       // malformed token metadata
	writeID  string
}

// read returns what two HEADs in a row of key agree on. One HEAD is not a
// snapshot on every store: versitygw's posix backend reads an object's
// metadata and its ETag at two moments, so a write landing in between
// pairs one version's token with the next version's ETag, and a
// compare-and-swap on that ETag would pass a check made against the wrong
// token. Two HEADs that agree on the write ID (unique per Put: a version
// that was replaced never comes back) saw one version current from the
// first HEAD's metadata read to the second's, which spans the first's ETag
// read: that pair is consistent. Without a write ID (an object written
// outside the guard) there is no token to protect.
func (g *Guard) read(ctx context.Context, key string) (object, error) {
	prev, err := g.head(ctx, key)
	if err != nil {
		return object{}, err
	}
	for range g.o.maxAttempts {
		cur, err := g.head(ctx, key)
		if err != nil {
			return object{}, err
		}
		if cur.same(prev) {
			return cur, nil
		}
		prev = cur
	}
	return object{}, fmt.Errorf("%w: %d reads in a row each saw another version", ErrContended, g.o.maxAttempts+1)
}

// same reports whether o and p describe the same version of an object.
func (o object) same(p object) bool {
	return o.exists == p.exists && o.etag == p.etag && o.writeID == p.writeID &&
		o.token == p.token && (o.tokenErr == nil) == (p.tokenErr == nil)
}

func (g *Guard) head(ctx context.Context, key string) (object, error) {
	return head(ctx, g.client, g.bucket, key)
}

func head(ctx context.Context, c *s3.Client, bucket, key string) (object, error) {
	out, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		if status(err) == 404 && ctx.Err() == nil {
			return object{}, nil
		}
		return object{}, err
	}
	o := object{exists: true, etag: aws.ToString(out.ETag)}
	for k, v := range out.Metadata {
		switch strings.ToLower(k) {
		case MetaToken:
			tok, err := fence.ParseToken(v)
			if err == nil && tok.Seq == 0 {
				err = errors.New("seq 0")
			}
			if err != nil {
				o.tokenErr = fmt.Errorf("%w: key %q: %s %q: %v", ErrCorruptToken, key, MetaToken, v, err)
			} else {
				o.token = tok
			}
		case MetaWriteID:
			o.writeID = v
		}
	}
	return o, nil
}

// admit checks t against the object's stored token.
func admit(t fence.Token, key string, cur object) error {
	if cur.tokenErr != nil {
		return cur.tokenErr
	}
	if !cur.exists || cur.token.Seq == 0 {
		return nil
	}
	if cur.token.Name != t.Name {
		return &OtherLockError{Key: key, Stored: cur.token.Name, Name: t.Name}
	}
	if t.Seq < cur.token.Seq {
		return &fence.StaleTokenError{Name: t.Name, Seq: t.Seq, Highest: cur.token.Seq}
	}
	return nil
}

// sameContent reports whether etag is the MD5 of a body with the given hex
// MD5: the ETag of a single-part, unencrypted (or SSE-S3) object.
func sameContent(etag, md5hex string) bool {
	return strings.EqualFold(strings.Trim(etag, `"`), md5hex)
}

// The outcomes of a failed PUT.
type failure int

const (
	raced      failure = iota // 412, or 404 on If-Match: another write (or a delete) landed first
	conflicted                // 409 ConditionalRequestConflict: a concurrent conditional write was in progress; nothing written
	inTransit                 // no answer, or a 5xx: the PUT may or may not have landed
	definite                  // any other answer: refused, nothing written
)

func classify(err error) failure {
	switch code := status(err); {
	case code == 412:
		return raced
	case code == 404 && apiCode(err) == "NoSuchKey":
		return raced
	case code == 409 && apiCode(err) == "ConditionalRequestConflict":
		return conflicted
	case code >= 500:
		return inTransit
	case code != 0:
		return definite
	}
	// No answer: in transit if the request may have been sent (a transport
	// error, or the attempt's own timeout); refused before sending
	// otherwise (no credentials, a bad argument).
	var send *smithyhttp.RequestSendError
	if errors.As(err, &send) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return inTransit
	}
	return definite
}

// status returns the HTTP status of a failed call, or 0 if there was no
// response.
func status(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// apiCode returns the S3 error code of a failed call ("PreconditionFailed"),
// or "".
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// ctxError is err reported as the end of ctx, matching ctx.Err().
func ctxError(ctx context.Context, err error) error {
	if errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
}

// backoff returns the pause before the n-th retry (n >= 1) that follows a
// 409 or a PUT lost in transit: exponential from 10ms, capped at
// maxBackoff, with full jitter.
func backoff(n int) time.Duration {
	d := min(maxBackoff, 10*time.Millisecond<<min(n-1, 10))
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func newWriteID() string {
	var b [16]byte
	_, _ = cryptorand.Read(b[:])
	return hex.EncodeToString(b[:])
}
