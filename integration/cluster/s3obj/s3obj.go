// Package s3obj reads the harness's S3 objects the one way the worker (the
// register's plain read) and the run's audit (every version) both need:
// the body and the fencing token s3fence keeps in the object's metadata.
package s3obj

import (
	"context"
	"errors"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/dlock-go/dlock/contrib/s3fence"
)

// Get reads key in bucket (the version given, if version is not nil): its
// body and its token metadata, both "" for a key that does not exist.
func Get(ctx context.Context, c *s3.Client, bucket, key string, version *string) (body, token string, err error) {
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), VersionId: version})
	if err != nil {
		var nsk *types.NoSuchKey
		if errors.As(err, &nsk) {
			return "", "", nil
		}
		return "", "", err
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return "", "", err
	}
	return string(b), out.Metadata[s3fence.MetaToken], nil
}
