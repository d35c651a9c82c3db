package fence_test

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock/fence"
)

func ExampleMemoryGuard() {
	ctx := context.Background()
	g := fence.NewMemoryGuard()
	fmt.Println(g.Admit(ctx, fence.Token{Name: "orders", Seq: 7}))
	fmt.Println(g.Admit(ctx, fence.Token{Name: "orders", Seq: 8}))
	fmt.Println(g.Admit(ctx, fence.Token{Name: "orders", Seq: 7}))
	fmt.Println(g.Admit(ctx, fence.Token{Name: "orders", Seq: 0}))
	// Output:
	// <nil>
	// <nil>
	// fence: stale token for "orders": seq 7 is below the highest admitted seq 8
	// fence: no token (seq 0): lock "orders"
}

func ExampleParseToken() {
	t := fence.Token{Name: "billing/eu west", Seq: 42}
	s := t.String()
	back, err := fence.ParseToken(s)
	fmt.Println(s, back == t, err)
	// Output: billing/eu%20west:42 true <nil>
}
