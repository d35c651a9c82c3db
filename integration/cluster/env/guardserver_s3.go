package env

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/dlock-go/dlock/contrib/s3fence/s3test"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/integration/cluster/history"
	"github.com/dlock-go/dlock/integration/cluster/s3obj"
	"github.com/dlock-go/dlock/internal/testenv"
)

// s3GuardPort is the guard's S3 server's port on the resource's host.
const s3GuardPort = 9000

// S3Bucket is the guard run's bucket.
const S3Bucket = "dlock-cluster"

// S3Guard is a guard run's object store ("s3"): versitygw (s3test.Binary,
// the version contrib/s3fence is tested on) with its posix backend in the
// resource's namespace, its data under the run's artifacts (s3/root, the
// object versions in s3/versions), one bucket with versioning on. The
// workers write the fenced register through contrib/s3fence's Guard.Put:
// the token in the object's metadata, the write conditional on the ETag
// Put read. Every admitted write is a version of the register's object:
// at the end the harness lists them (ListObjectVersions) and reads each
// one's body and token, the resource-side record of what the guard
// admitted, ordered by version ID (versitygw's posix backend makes them
// with ulid.Make, monotonic in its process; an admitted write's request
// reached the store after the version it was conditional on was current,
// so the IDs order the admitted writes as the store applied them).
//
// Keys, per lock L: the register "reg/L" holds "<tok>:<v>" (the token is
// in the body too, so that no two writes under different tokens have the
// same content: s3fence's limit), the control "ctl/L" a counter written
// with plain GetObject/PutObject.
type S3Guard struct {
	Host           *Host
	h              *Harness
	bin            string
	dir            string // root/, versions/, meta/ (without xattrs)
	access, secret string

	created bool

	serverProc
}

func (h *Harness) StartS3Guard(ctx context.Context, host *Host) (*S3Guard, error) {
	bin, err := s3test.Binary(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(filepath.Join(h.Dir, "s3"))
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"root", "versions"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	sg := &S3Guard{Host: host, h: h, bin: bin, dir: dir, access: "dlock-cluster", secret: randHex(20)}
	if err := sg.Start(ctx); err != nil {
		return nil, err
	}
	return sg, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (sg *S3Guard) endpoint() string {
	return "http://" + net.JoinHostPort(sg.Host.IP, strconv.Itoa(s3GuardPort))
}

// DSN is http://access:secret@host:port/bucket (the worker's -guard-dsn).
func (sg *S3Guard) DSN() string {
	u := url.URL{Scheme: "http", User: url.UserPassword(sg.access, sg.secret), Host: net.JoinHostPort(sg.Host.IP, strconv.Itoa(s3GuardPort)), Path: "/" + S3Bucket}
	return u.String()
}

// Start starts the server on its directory and waits until it answers;
// the first time, it creates the bucket and turns versioning on.
func (sg *S3Guard) Start(ctx context.Context) error {
	root := filepath.Join(sg.dir, "root")
	args := []string{sg.bin,
		"--port", net.JoinHostPort(sg.Host.IP, strconv.Itoa(s3GuardPort)),
		"--access", sg.access, "--secret", sg.secret, "--region", s3test.Region,
		"--keep-alive", "--quiet",
		"posix", "--versioning-dir", filepath.Join(sg.dir, "versions")}
	if !testenv.Xattrs(root) {
		meta := filepath.Join(sg.dir, "meta")
		if err := os.MkdirAll(meta, 0o755); err != nil {
			return err
		}
		args = append(args, "--sidecar", meta)
	}
	args = append(args, root)
	// versitygw also reads VGW_* and ROOT_* variables as settings; the
	// harness's environment sets none.
	p, err := StartProc(sg.Host, "s3-guard", filepath.Join(sg.h.Dir, "logs", "s3-guard.log"), nil, nil, args...)
	if err != nil {
		return err
	}
	if err := sg.started(sg.h, p); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := sg.Client()
	for {
		_, err := c.ListBuckets(wctx, &s3.ListBucketsInput{})
		if err == nil {
			break
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("versitygw does not answer: %v (%w)", err, wctx.Err())
		case <-p.Done():
			return fmt.Errorf("versitygw exited: %v (its log: logs/s3-guard.log)", p.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if sg.created {
		return nil
	}
	if _, err := c.CreateBucket(wctx, &s3.CreateBucketInput{Bucket: aws.String(S3Bucket)}); err != nil {
		return fmt.Errorf("create bucket: %w", err)
	}
	if _, err := c.PutBucketVersioning(wctx, &s3.PutBucketVersioningInput{
		Bucket:                  aws.String(S3Bucket),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled},
	}); err != nil {
		return fmt.Errorf("bucket versioning: %w", err)
	}
	sg.created = true
	return nil
}

// Client is an S3 client of the server, from the test's namespace (the
// admin link).
func (sg *S3Guard) Client() *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(sg.endpoint()),
		Region:       s3test.Region,
		Credentials:  credentials.NewStaticCredentialsProvider(sg.access, sg.secret, ""),
		UsePathStyle: true,
		HTTPClient:   &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
	})
}

// Collect writes audit.jsonl (every version of the register objects, in
// version order) and control.json (the control's counters).
func (sg *S3Guard) Collect(ctx context.Context) error {
	c := sg.Client()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ctl := map[string]int64{}
	for _, wl := range sg.h.Cfg.Workloads {
		lock := "dlock-" + wl
		body, _, err := s3obj.Get(cctx, c, S3Bucket, "ctl/"+lock, nil)
		if err != nil {
			return fmt.Errorf("control %s: %w", lock, err)
		}
		if body != "" {
			if ctl[lock], err = strconv.ParseInt(body, 10, 64); err != nil {
				return fmt.Errorf("control %s holds %q", lock, body)
			}
		}
	}
	recs, err := S3Versions(cctx, c)
	if err != nil {
		return fmt.Errorf("versions: %w", err)
	}
	return writeGuardRecords(sg.h.Dir, recs, ctl)
}

// S3Versions reads every version of the register objects ("reg/L") as
// Write records, ordered by version ID (T: the ID's time).
func S3Versions(ctx context.Context, c *s3.Client) ([]history.Record, error) {
	type version struct {
		key, id string
	}
	var vs []version
	p := s3.NewListObjectVersionsPaginator(c, &s3.ListObjectVersionsInput{Bucket: aws.String(S3Bucket), Prefix: aws.String("reg/")})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, v := range page.Versions {
			vs = append(vs, version{aws.ToString(v.Key), aws.ToString(v.VersionId)})
		}
		if len(page.DeleteMarkers) > 0 {
			return nil, fmt.Errorf("%d delete markers under reg/: nothing deletes the register", len(page.DeleteMarkers))
		}
	}
	slices.SortFunc(vs, func(a, b version) int { return strings.Compare(a.id, b.id) })
	out := make([]history.Record, 0, len(vs))
	for _, v := range vs {
		ms, err := ulidTime(v.id)
		if err != nil {
			return nil, fmt.Errorf("%s version %q: %w", v.key, v.id, err)
		}
		body, meta, err := s3obj.Get(ctx, c, S3Bucket, v.key, aws.String(v.id))
		if err != nil {
			return nil, fmt.Errorf("%s version %s: %w", v.key, v.id, err)
		}
		r, err := s3Record(strings.TrimPrefix(v.key, "reg/"), body, meta)
		if err != nil {
			return nil, fmt.Errorf("version %s: %w", v.id, err)
		}
		r.T = ms * int64(time.Millisecond)
		out = append(out, r)
	}
	return out, nil
}

// s3Record is a register version: body "<tok>:<v>", and the token in
// its metadata (dlock-token, "<lock>:<tok>" or absent when written
// without the guard) the same.
func s3Record(lock, body, meta string) (history.Record, error) {
	tok, v, ok := strings.Cut(body, ":")
	t, err1 := strconv.ParseUint(tok, 10, 64)
	val, err2 := strconv.ParseInt(v, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return history.Record{}, fmt.Errorf("register %s holds %q", lock, body)
	}
	if meta != "" {
		mt, err := fence.ParseToken(meta)
		if err != nil || mt.Name != lock || mt.Seq != t {
			return history.Record{}, fmt.Errorf("register %s holds %q under token %q", lock, body, meta)
		}
	}
	return history.Record{Kind: history.Write, Lock: lock, Tok: t, Value: val}, nil
}

// ulidTime is the time (Unix ms) of a ULID (versitygw's version IDs): its
// first 10 characters, Crockford base32.
func ulidTime(id string) (int64, error) {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	if len(id) != 26 {
		return 0, errors.New("not a ULID")
	}
	var ms int64
	for i := range 10 {
		d := strings.IndexByte(alphabet, id[i])
		if d < 0 {
			return 0, errors.New("not a ULID")
		}
		ms = ms<<5 | int64(d)
	}
	return ms, nil
}
