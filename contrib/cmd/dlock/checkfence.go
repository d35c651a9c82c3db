package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/logging"

	"github.com/dlock-go/dlock/contrib/s3fence"
	"github.com/dlock-go/dlock/fence"
)

const checkFenceDescription = `
Checks that the S3-compatible store behind s3://BUCKET[/PREFIX] honours the
conditional writes that fencing relies on (package contrib/s3fence), before
you trust it with fenced writes. It prints each check on stdout, PASS or
FAIL with what the store must do to pass, and stops at the first failure,
whose error goes to stderr:

  the checks s3fence.New runs, on one probe object: a PUT with
  If-None-Match: * on an absent key is accepted and keeps its metadata; a
  second one is refused with 412; a PUT with If-Match on the current ETag
  is accepted and changes the ETag; a PUT with If-Match on the ETag it
  replaced (a deliberately stale one) is refused with 412; neither refused
  PUT left a trace;

  then a concurrent check: --writers goroutines write one key through the
  guard with --tokens interleaved fencing tokens, and no token may be
  written after a higher one was, and the key must end with the highest.

Probe objects live under PREFIX (default .dlock-s3fence-probe/) and are
deleted at the end, also on failure. It needs s3:PutObject, s3:GetObject
and s3:DeleteObject there.

The endpoint, region and credentials come from the standard AWS
configuration (AWS_ENDPOINT_URL or AWS_ENDPOINT_URL_S3, AWS_REGION,
AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE and the shared
config files); --endpoint and --region override them. Requests are
path-style (http://host/BUCKET/key) when an endpoint is set, as most
S3-compatible servers want; --path-style=false turns that off.

Passing shows what these requests showed, on this store, today: it cannot
prove that the store is atomic under every load.

Exit codes: 0 every check passed, 1 a check failed or the store could not
be reached, 2 bad flags or arguments.`

func runCheckFence(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "check-fence", "[flags] s3://BUCKET[/PREFIX]", checkFenceDescription)
	endpoint := fs.String("endpoint", "", "S3 endpoint URL (default: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL or the AWS config; else AWS S3)")
	region := fs.String("region", "", "region to sign for (default: $AWS_REGION or the AWS config; else us-east-1)")
	pathStyle := fs.Bool("path-style", false, "path-style requests (default: true when an endpoint is set)")
	writers := fs.Int("writers", 8, "concurrent writers of the concurrent check")
	tokens := fs.Int("tokens", 64, "fencing tokens the concurrent check writes, dealt to the writers in rounds")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	pos, err := parse(fs, args, true)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("want one argument, s3://BUCKET[/PREFIX]; got %d", len(pos))
	}
	bucket, prefix, err := parseS3URL(pos[0])
	if err != nil {
		return usageError("%v", err)
	}
	switch {
	case *writers < 1:
		return usageError("--writers %d must be at least 1", *writers)
	case *tokens < *writers:
		return usageError("--tokens %d must be at least --writers %d", *tokens, *writers)
	case *timeout <= 0:
		return usageError("--timeout %v must be positive", *timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	// The SDK logs some warnings (a response without a checksum, say) to
	// stderr on its own; what matters reaches the user as a check's error.
	loadOpts := []func(*config.LoadOptions) error{config.WithLogger(logging.Nop{})}
	if *region != "" {
		loadOpts = append(loadOpts, config.WithRegion(*region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return fmt.Errorf("AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	var where string
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if *endpoint != "" {
			o.BaseEndpoint = aws.String(*endpoint)
		}
		o.UsePathStyle = *pathStyle
		if o.BaseEndpoint != nil && !isSet(fs, "path-style") {
			o.UsePathStyle = true
		}
		where = "AWS S3"
		if o.BaseEndpoint != nil {
			where = *o.BaseEndpoint
		}
		if o.UsePathStyle {
			where += ", path-style"
		}
	})
	opts := []s3fence.Option{}
	if prefix != "" {
		opts = append(opts, s3fence.WithProbePrefix(prefix))
	} else {
		prefix = s3fence.DefaultProbePrefix
	}
	fmt.Fprintf(e.stdout, "checking s3://%s/%s at %s (region %s)\n", bucket, prefix, where, cfg.Region)

	// A failed check is printed with what it expected; its error, once,
	// on stderr (report).
	checks, err := s3fence.Verify(ctx, client, bucket, opts...)
	for _, c := range checks {
		printCheck(e, c.Name, c.Expect, c.Err == nil)
	}
	if err != nil {
		if errors.Is(err, s3fence.ErrUnsafeStore) {
			return fmt.Errorf("s3://%s cannot fence writes: %w", bucket, err)
		}
		return err
	}

	g, err := s3fence.New(ctx, client, bucket, opts...)
	if err != nil {
		return err
	}
	const name = "concurrent fenced writes"
	expect := fmt.Sprintf("%d writers, tokens 1..%d interleaved: none written after a higher one; the key ends with the highest", *writers, *tokens)
	summary, err := concurrentCheck(ctx, client, g, prefix, *writers, *tokens)
	if err != nil {
		printCheck(e, name, expect, false)
		return fmt.Errorf("s3://%s cannot fence writes: %w", bucket, err)
	}
	printCheck(e, name, expect+": "+summary, true)
	fmt.Fprintf(e.stdout, "ok: s3://%s honours the conditional writes that s3fence relies on (probe objects deleted)\n", bucket)
	return nil
}

// printCheck prints one check's line: PASS or FAIL, its name, and what it
// expects of the store.
func printCheck(e *env, name, expect string, passed bool) {
	verdict := "FAIL"
	if passed {
		verdict = "PASS"
	}
	fmt.Fprintf(e.stdout, "%s  %-29s %s\n", verdict, name, expect)
}

// parseS3URL splits s3://BUCKET[/PREFIX] into the bucket and a prefix that
// ends with "/" (or is empty).
func parseS3URL(s string) (bucket, prefix string, err error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", "", fmt.Errorf("%q: %v", s, err)
	}
	if u.Scheme != "s3" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", "", fmt.Errorf("%q: want s3://BUCKET[/PREFIX]", s)
	}
	prefix = strings.TrimPrefix(u.Path, "/")
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return u.Host, prefix, nil
}

// concurrentCheck writes one key under prefix from writers goroutines
// with tokens interleaved tokens (round r's tokens r*writers+1 ..
// (r+1)*writers dealt one to each writer, shuffled), each token writing
// its own content. It fails if a token was written after a higher one had
// been, if the key held a lower token right after a write, if a Put failed
// other than as stale, or if the key does not end with the highest token
// and its content. It deletes the key.
func concurrentCheck(ctx context.Context, client *s3.Client, g *s3fence.Guard, prefix string, writers, tokens int) (string, error) {
	var id [8]byte
	_, _ = rand.Read(id[:])
	key := prefix + "concurrent-" + hex.EncodeToString(id[:])
	defer func() {
		cctx, cancel := cleanupContext(ctx)
		defer cancel()
		_, _ = client.DeleteObject(cctx, &s3.DeleteObjectInput{Bucket: aws.String(g.Bucket()), Key: aws.String(key)})
	}()
	const lockName = "dlock-check-fence"
	body := func(seq uint64) string { return fence.Token{Name: lockName, Seq: seq}.String() }

	hands := make([][]uint64, writers)
	for r := 0; r*writers < tokens; r++ {
		perm := mrand.Perm(writers)
		for w := range writers {
			if seq := r*writers + perm[w] + 1; seq <= tokens {
				hands[w] = append(hands[w], uint64(seq))
			}
		}
	}
	var (
		maxWritten     atomic.Uint64
		written, stale atomic.Int64
		mu             sync.Mutex
		firstErr       error
		wg             sync.WaitGroup
		start          = make(chan struct{})
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	for _, hand := range hands {
		wg.Go(func() {
			<-start
			for _, seq := range hand {
				before := maxWritten.Load()
				err := g.Put(ctx, fence.Token{Name: lockName, Seq: seq}, key, strings.NewReader(body(seq)))
				switch {
				case err == nil:
					written.Add(1)
					if seq < before {
						fail(fmt.Errorf("token %d was written after token %d had been: the store let a stale conditional write through", seq, before))
					}
					for m := maxWritten.Load(); seq > m && !maxWritten.CompareAndSwap(m, seq); m = maxWritten.Load() {
					}
					// Tokens never go down: right after this write the key
					// holds this token or a higher one.
					if tok, err := g.Token(ctx, key); err != nil {
						fail(err)
						return
					} else if tok.Seq < seq {
						fail(fmt.Errorf("right after token %d was written the key holds token %d: the store let a stale conditional write through", seq, tok.Seq))
					}
				case errors.Is(err, fence.ErrStaleToken):
					stale.Add(1)
				default:
					fail(fmt.Errorf("token %d: %w", seq, err))
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if firstErr != nil {
		return "", firstErr
	}
	top := uint64(tokens)
	tok, err := g.Token(ctx, key)
	if err != nil {
		return "", err
	}
	if tok.Seq != top {
		return "", fmt.Errorf("the key ends with token %d, not %d, the highest written", tok.Seq, top)
	}
	out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(g.Bucket()), Key: aws.String(key)})
	if err != nil {
		return "", err
	}
	defer out.Body.Close()
	b, err := io.ReadAll(io.LimitReader(out.Body, 1<<10))
	if err != nil {
		return "", err
	}
	if string(b) != body(top) {
		return "", fmt.Errorf("the key holds %q, not the content of token %d", b, top)
	}
	return strconv.FormatInt(written.Load(), 10) + " written, " + strconv.FormatInt(stale.Load(), 10) + " refused as stale", nil
}
