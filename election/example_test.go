package election_test

import (
	"context"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock/election"
	"github.com/dlock-go/dlock/fence"
	"github.com/dlock-go/dlock/session"
)

// The examples need a running etcd (localhost:2379), so they compile but do
// not run.

// Campaign, lead while the term lasts, pass the epoch as a fencing token,
// resign.
func ExampleElection_Campaign() {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"localhost:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	s, err := session.New(ctx, cli, session.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(context.Background())
	el, err := election.New(s, "scheduler")
	if err != nil {
		log.Fatal(err)
	}

	term, err := el.Campaign(ctx, "host-a:8080")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("elected, epoch", term.Epoch())
	guard := fence.NewMemoryGuard() // stands for the resource's own check
	for {
		select {
		case <-term.Done():
			fmt.Println("stepped down:", term.Err())
			return
		case <-time.After(time.Second):
			if err := guard.Admit(ctx, term.Token()); err != nil {
				return // a newer leader wrote there: stop
			}
			// act, with term.Token() attached to every write
		}
	}
}

// Follow the election: every leader, every value, and "no leader".
func ExampleElection_Observe() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"localhost:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	s, err := session.New(ctx, cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(context.Background())
	el, err := election.New(s, "scheduler")
	if err != nil {
		log.Fatal(err)
	}
	for l := range el.Observe(ctx) { // closed when ctx ends
		if (l == election.Leader{}) {
			fmt.Println("no leader")
			continue
		}
		fmt.Printf("leader %s (epoch %d)\n", l.Value, l.Epoch)
	}
}

// Run in the spirit of client-go's leader elector: work while elected,
// campaign again after a loss.
func ExampleRun() {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"localhost:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	err = election.Run(ctx, election.Config{
		Client:         cli,
		Name:           "scheduler",
		Value:          "host-a:8080",
		SessionOptions: []session.Option{session.WithTTL(10 * time.Second)},
		Recampaign:     true,
		OnElected: func(ctx context.Context, term *election.Term) error {
			log.Printf("leading with token %v", term.Token())
			<-ctx.Done() // do the work until step-down
			log.Printf("stepping down: %v", context.Cause(ctx))
			return nil
		},
		OnStoppedLeading: func() { log.Print("stopped leading") },
		OnNewLeader:      func(l election.Leader) { log.Printf("leader is now %q", l.Value) },
	})
	log.Print(err)
}

// Proclaim a new value without giving up leadership.
func ExampleTerm_Proclaim() {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"localhost:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	s, err := session.New(ctx, cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(context.Background())
	el, err := election.New(s, "scheduler")
	if err != nil {
		log.Fatal(err)
	}
	term, err := el.Campaign(ctx, "host-a:8080 (warming up)")
	if err != nil {
		log.Fatal(err)
	}
	if err := term.Proclaim(ctx, "host-a:8080"); err != nil {
		log.Print(err) // leadership lost: the key is not touched
	}
	if err := term.Resign(ctx); err != nil {
		log.Print(err)
	}
}
