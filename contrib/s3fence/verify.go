package s3fence

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// cleanupTimeout bounds the deletion of a probe object, also after ctx
// ended.
const cleanupTimeout = 10 * time.Second

// Check is one step of the probe that New runs against a store (see
// Verify).
type Check struct {
	Name   string // a short name, such as "stale compare-and-swap"
	Expect string // what the store must do to pass
	Err    error  // nil if the store passed; matches ErrUnsafeStore if it showed it cannot fence writes
}

// Verify runs the checks that New runs before it trusts a store, on one
// probe object under the probe prefix (WithProbePrefix), and returns them
// in order, up to the first that failed: a PUT with If-None-Match: * on
// an absent key is accepted and keeps its user metadata; a second one is
// refused with 412; a PUT with If-Match on the current ETag is accepted and
// changes the ETag; a PUT with If-Match on the ETag it replaced (a
// deliberately stale one) is refused with 412; and neither refused PUT
// left a trace. Then it deletes the probe object (bounded, also after ctx
// ended).
//
// The error is that of the first failed check (matching ErrUnsafeStore
// when the store answered but did not honour a condition; any other error
// is one of access or transport), or the failure to delete the probe
// object. Verify needs s3:PutObject, s3:GetObject and s3:DeleteObject on
// the probe prefix. Passing shows that the store evaluates conditions one
// request at a time; it cannot show that it evaluates them atomically
// under concurrent writers.
func Verify(ctx context.Context, client *s3.Client, bucket string, opts ...Option) ([]Check, error) {
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
	return verify(ctx, client, bucket, o)
}

func verify(ctx context.Context, client *s3.Client, bucket string, o options) (checks []Check, err error) {
	p := &probe{ctx: ctx, c: client, bucket: bucket, key: o.probePrefix + newWriteID()}
	defer func() {
		if !p.written {
			return
		}
		if derr := p.delete(); derr != nil && err == nil {
			err = derr
		}
	}()
	for _, step := range []struct {
		name, expect string
		run          func() error
	}{
		{"create", "a PUT with If-None-Match: * on an absent key is accepted", p.create},
		{"metadata", "a HEAD returns an ETag and the user metadata written", p.metadata},
		{"create-only", "a second PUT with If-None-Match: * on the key is refused with 412", p.createOnly},
		{"compare-and-swap", "a PUT with If-Match on the current ETag is accepted and changes the ETag", p.swap},
		{"stale compare-and-swap", "a PUT with If-Match on the replaced (stale) ETag is refused with 412", p.staleSwap},
		{"refused writes left no trace", "the object is the one the accepted compare-and-swap wrote", p.untouched},
	} {
		err := step.run()
		checks = append(checks, Check{Name: step.name, Expect: step.expect, Err: err})
		if err != nil {
			return checks, err
		}
	}
	return checks, nil
}

// probe is the state of one Verify.
type probe struct {
	ctx     context.Context
	c       *s3.Client
	bucket  string
	key     string
	written bool   // the probe object may exist
	etag    string // the ETag after create (then stale)
	current string // the write ID of the accepted compare-and-swap
}

func (p *probe) put(body, writeID string, cond func(*s3.PutObjectInput)) error {
	in := &s3.PutObjectInput{
		Bucket:   aws.String(p.bucket),
		Key:      aws.String(p.key),
		Body:     strings.NewReader(body),
		Metadata: map[string]string{MetaToken: "dlock-probe:1", MetaWriteID: writeID},
	}
	cond(in)
	p.written = true
	_, err := p.c.PutObject(p.ctx, in)
	return err
}

func ifNoneMatch(in *s3.PutObjectInput) { in.IfNoneMatch = aws.String("*") }

func ifMatch(etag string) func(*s3.PutObjectInput) {
	return func(in *s3.PutObjectInput) { in.IfMatch = aws.String(etag) }
}

func (p *probe) unsafe(format string, args ...any) error {
	return fmt.Errorf("%w: %s; writes to this store cannot be fenced", ErrUnsafeStore, fmt.Sprintf(format, args...))
}

// refusedCondition turns a PUT's error into the probe's: a store that
// rejects the condition headers themselves is unsafe; anything else
// (access, transport, no such bucket) is reported as it is.
func (p *probe) refusedCondition(what string, err error) error {
	switch code := apiCode(err); {
	case code == "NotImplemented" || status(err) == 501:
		return p.unsafe("%s: the store does not implement the condition (%v)", what, err)
	case code == "PreconditionFailed" || status(err) == 412:
		return p.unsafe("%s was refused with 412 although its condition held", what)
	}
	return fmt.Errorf("s3fence: probe %s/%s: %s: %w", p.bucket, p.key, what, err)
}

func (p *probe) create() error {
	if err := p.put("dlock s3fence probe: create", "create", ifNoneMatch); err != nil {
		return p.refusedCondition("a PUT with If-None-Match: * on an absent key", err)
	}
	return nil
}

func (p *probe) metadata() error {
	cur, err := head(p.ctx, p.c, p.bucket, p.key)
	if err != nil {
		return fmt.Errorf("s3fence: probe %s/%s: head: %w", p.bucket, p.key, err)
	}
	switch {
	case !cur.exists:
		return p.unsafe("the object written by an accepted PUT is not there")
	case cur.etag == "":
		return p.unsafe("a HEAD returns no ETag")
	case cur.writeID != "create" || cur.tokenErr != nil || cur.token.Seq != 1:
		return p.unsafe("user metadata (x-amz-meta-%s, x-amz-meta-%s) is not kept", MetaToken, MetaWriteID)
	}
	p.etag = cur.etag
	return nil
}

func (p *probe) createOnly() error {
	err := p.put("dlock s3fence probe: second create", "second create", ifNoneMatch)
	if err == nil {
		return p.unsafe("a second PUT with If-None-Match: * on an existing key succeeded (want 412 Precondition Failed): the store ignores create-only conditions")
	}
	return p.wantPreconditionFailed("a second PUT with If-None-Match: *", err)
}

func (p *probe) swap() error {
	if err := p.put("dlock s3fence probe: compare-and-swap", "swap", ifMatch(p.etag)); err != nil {
		return p.refusedCondition("a PUT with If-Match on the current ETag "+p.etag, err)
	}
	cur, err := head(p.ctx, p.c, p.bucket, p.key)
	if err != nil {
		return fmt.Errorf("s3fence: probe %s/%s: head: %w", p.bucket, p.key, err)
	}
	if cur.writeID != "swap" {
		return p.unsafe("an accepted PUT with If-Match did not replace the object")
	}
	if cur.etag == p.etag {
		return p.unsafe("the ETag %s did not change with the content", cur.etag)
	}
	p.current = "swap"
	return nil
}

func (p *probe) staleSwap() error {
	err := p.put("dlock s3fence probe: stale compare-and-swap", "stale swap", ifMatch(p.etag))
	if err == nil {
		return p.unsafe("a PUT with If-Match on a stale ETag (%s) succeeded (want 412 Precondition Failed): the store ignores compare-and-swap conditions", p.etag)
	}
	return p.wantPreconditionFailed("a PUT with If-Match on a stale ETag", err)
}

func (p *probe) wantPreconditionFailed(what string, err error) error {
	if status(err) == 412 {
		return nil
	}
	if apiCode(err) == "NotImplemented" || status(err) == 501 {
		return p.unsafe("%s: the store does not implement the condition (%v)", what, err)
	}
	return fmt.Errorf("s3fence: probe %s/%s: %s: want 412 Precondition Failed, got: %w", p.bucket, p.key, what, err)
}

func (p *probe) untouched() error {
	cur, err := head(p.ctx, p.c, p.bucket, p.key)
	if err != nil {
		return fmt.Errorf("s3fence: probe %s/%s: head: %w", p.bucket, p.key, err)
	}
	if cur.writeID != p.current {
		return p.unsafe("a PUT refused with 412 was written all the same (the object's write ID is %q, want %q)", cur.writeID, p.current)
	}
	return nil
}

func (p *probe) delete() error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), cleanupTimeout)
	defer cancel()
	_, err := p.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(p.bucket), Key: aws.String(p.key)})
	if err != nil {
		return fmt.Errorf("s3fence: probe: delete %s/%s (remove it by hand): %w", p.bucket, p.key, err)
	}
	return nil
}
