package s3fence_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/dlock-go/dlock/contrib/s3fence"
	"github.com/dlock-go/dlock/fence"
)

// A holder writes a manifest with its token; a paused holder whose lock
// has passed on is turned away, and the newer holder's manifest stands.
// (Needs an S3-compatible store, so it has no Output.)
func ExampleGuard_Put() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx) // AWS_REGION, AWS_ENDPOINT_URL, credentials...
	if err != nil {
		log.Fatal(err)
	}
	g, err := s3fence.New(ctx, s3.NewFromConfig(cfg), "my-bucket")
	if err != nil {
		log.Fatal(err) // for example s3fence.ErrUnsafeStore: the store ignores conditions
	}

	tok := fence.Token{Name: "tables/orders", Seq: 42} // from held.Token()
	// The token in the content keeps every write's content (and ETag) unique.
	manifest := fmt.Sprintf(`{"writer":%q,"snapshot":"s-0017"}`, tok)
	err = g.Put(ctx, tok, "tables/orders/manifest.json", strings.NewReader(manifest))
	if errors.Is(err, fence.ErrStaleToken) {
		fmt.Println("lost the lock while paused; nothing was written:", err)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
}

// Verify runs New's checks and shows each; dlock check-fence prints them.
func ExampleVerify() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	checks, err := s3fence.Verify(ctx, s3.NewFromConfig(cfg), "my-bucket", s3fence.WithProbePrefix("locks/probe/"))
	for _, c := range checks {
		if c.Err != nil {
			fmt.Println("FAIL", c.Name, c.Err)
			continue
		}
		fmt.Println("PASS", c.Name+":", c.Expect)
	}
	if err != nil {
		log.Fatal(err)
	}
}
