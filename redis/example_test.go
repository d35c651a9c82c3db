package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/redis"
)

// The examples need running Redis servers, so they are compiled but not run.

func ExampleNew() {
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	m, err := redis.New(client, "reports/nightly", redis.WithTTL(30*time.Second), redis.WithAutoExtend(10*time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	h, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer h.Unlock(ctx)

	// Pass the token to the resource, which rejects stale ones.
	guard := fence.NewMemoryGuard()
	if err := guard.Admit(ctx, h.Token()); err != nil {
		log.Fatal(err)
	}
	select {
	case <-h.Done():
		// Stop acting: the grant may have ended.
	default:
		fmt.Println("holding", h.Token())
	}
}

func ExampleNewRedlock() {
	ctx := context.Background()
	var clients []goredis.UniversalClient
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379", "10.0.0.4:6379", "10.0.0.5:6379"} {
		c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
		defer c.Close()
		clients = append(clients, c)
	}
	r, err := redis.NewRedlock(clients, "cache/rebuild", redis.WithTTL(10*time.Second), redis.WithNodeTimeout(50*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	h, err := r.TryLock(ctx)
	switch {
	case errors.Is(err, lock.ErrLocked):
		fmt.Println("someone else is rebuilding")
		return
	case errors.Is(err, redis.ErrNoQuorum):
		log.Fatal("fewer than a majority of nodes answered: ", err)
	case err != nil:
		log.Fatal(err)
	}
	defer h.Unlock(ctx)
	// Redlock has no fencing token: a guard refuses it.
	fmt.Println(h.Token().Seq)
}

func ExampleGrant_Extend() {
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	m, err := redis.New(client, "jobs/import", redis.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	h, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	g := h.(*redis.Grant)
	defer g.Unlock(ctx)
	for range 3 {
		// ... a step of work shorter than the TTL ...
		if err := g.Extend(ctx); errors.Is(err, lock.ErrLockLost) {
			log.Print("lost the lock; stopping: ", err)
			return
		}
	}
}

func ExampleDrain() {
	ctx := context.Background()
	var clients []goredis.UniversalClient
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"} {
		clients = append(clients, goredis.NewClient(&goredis.Options{Addr: addr}))
	}
	r, err := redis.NewRedlock(clients, "cache/rebuild")
	if err != nil {
		log.Fatal(err)
	}
	if h, err := r.TryLock(ctx); err == nil {
		// ... work ...
		if err := h.Unlock(ctx); err != nil {
			log.Print(err) // the grant had expired: the work ran unprotected at the end
		}
	}
	// Unlock returned at a majority: let the requests still out finish
	// (bounded), then close the clients.
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := redis.Drain(dctx, clients...); err != nil {
		log.Print(err)
	}
	for _, c := range clients {
		c.Close()
	}
}

func ExampleWithOwner() {
	ctx := context.Background()
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	m, err := redis.New(client, "migrations", redis.WithOwner("deployer-7"))
	if err != nil {
		log.Fatal(err)
	}
	h, err := m.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// An operator sees the owner after the grant's random value.
	v, err := client.Get(ctx, redis.DefaultPrefix+"{migrations}").Result()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.Fields(v)[1]) // deployer-7
	if err := h.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
}
