package s3fence_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock/contrib/s3fence"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/fence/fencetest"
)

// admitter presents the S3 guard to the fence.Guard suite: Admit(t) is a
// fenced Put of the object named by the lock name, with the token's wire
// form as the body (so that every token writes its own content; see the
// package documentation on ETags), and the mark is the token that last
// wrote it.
type admitter struct {
	g      *s3fence.Guard
	prefix string
}

// key escapes the name's slashes: a filesystem-backed store cannot hold
// both "orders" and "orders/eu" (a file and a directory of one name).
func (a admitter) key(name string) string { return a.prefix + url.PathEscape(name) }

func (a admitter) Admit(ctx context.Context, t fence.Token) error {
	return a.g.Put(ctx, t, a.key(t.Name), strings.NewReader(t.String()))
}

// The fence.Guard conformance suite against versitygw, with its 50
// concurrent writers of interleaved tokens on one key. Every subtest has a
// bucket of its own.
func TestConformance(t *testing.T) {
	e := newEnv(t)
	var n atomic.Int64
	fencetest.Run(t, fencetest.Config{
		New: func(t *testing.T) fence.Guard {
			bucket := e.srv.NewBucket(t)
			g, err := s3fence.New(t.Context(), e.client, bucket)
			require.NoError(t, err)
			return admitter{g: g, prefix: fmt.Sprintf("fencetest-%d/", n.Add(1))}
		},
		Highest: func(t *testing.T, g fence.Guard, name string) uint64 {
			a := g.(admitter)
			tok, err := a.g.Token(t.Context(), a.key(name))
			require.NoError(t, err)
			return tok.Seq
		},
	})
}
