package dlock_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/lock"
)

func ExampleParseDSN() {
	for _, dsn := range []string{
		"etcd://10.0.0.1:2379,10.0.0.2:2379/myapp?ttl=10s",
		"redis://cache:6379/myapp?ttl=30s",
		"redlock://r1,r2,r3,r4,r5",
		"redlock://r1,r2",
	} {
		c, err := dlock.ParseDSN(dsn)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(c.Backend, c.Endpoints, c.Prefix, c.TTL)
	}
	// Output:
	// etcd [10.0.0.1:2379 10.0.0.2:2379] myapp 10s
	// redis [cache:6379] myapp 30s
	// redlock [r1:6379 r2:6379 r3:6379 r4:6379 r5:6379]  0s
	// dlock: invalid config: endpoints: redlock needs at least 3 independent nodes, got 2
}

func ExampleOpen() {
	etcd, err := etcdtest.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer etcd.Close()
	ctx := context.Background()

	// The one line that picks the backend.
	dsn := "etcd://" + strings.TrimPrefix(etcd.Endpoints()[0], "http://") + "/myapp?ttl=10s"

	cfg, err := dlock.ParseDSN(dsn)
	if err != nil {
		log.Fatal(err)
	}
	c, err := dlock.Open(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	l, err := c.Locker("jobs/nightly")
	if err != nil {
		log.Fatal(err)
	}
	err = lock.Do(ctx, l, func(ctx context.Context, h lock.Held) error {
		fmt.Println("holding", h.Token().Name)
		return nil
	})
	fmt.Println(err)
	// Output:
	// holding jobs/nightly
	// <nil>
}
