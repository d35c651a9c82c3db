package redisfence_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/contrib/redisfence"
	"github.com/dlock-go/dlock/fence"
)

// Set writes the value only if the holder's token is still current, in one
// script. (Needs a Redis server, so it has no Output.)
func ExampleGuard_Set() {
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: "redis.internal:6379"})
	defer client.Close()
	g, err := redisfence.New(client)
	if err != nil {
		log.Fatal(err)
	}

	tok := fence.Token{Name: "config/primary", Seq: 42} // from held.Token()
	err = g.Set(ctx, tok, "config/primary:value", "v2", 0)
	if errors.Is(err, fence.ErrStaleToken) {
		fmt.Println("lost the lock while paused; nothing was written:", err)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
}

// Admit checks a token at a resource that keeps its high-water mark in
// Redis, for example before starting a job that a newer holder may already
// have started.
func ExampleGuard_Admit() {
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: "redis.internal:6379"})
	defer client.Close()
	g, err := redisfence.New(client, redisfence.WithPrefix("jobs:fence:"))
	if err != nil {
		log.Fatal(err)
	}
	if err := g.Admit(ctx, fence.Token{Name: "nightly", Seq: 7}); err != nil {
		log.Fatal(err)
	}
}
