package session_test

import (
	"context"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/session"
)

func Example() {
	c, err := etcdtest.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	cli, err := clientv3.New(c.Config())
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()

	s, err := session.New(ctx, cli, session.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deadline ahead:", time.Until(s.Deadline()) > 0)
	// Holders select on s.Done() (or a lock's Held.Done()) and stop acting
	// when it closes.
	if err := s.Close(ctx); err != nil {
		log.Fatal(err)
	}
	<-s.Done()
	fmt.Println(s.Err())
	// Output:
	// deadline ahead: true
	// session: closed
}
