package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/election"
	"github.com/dlock-go/dlock/lock"
)

const electDescription = `
dlock elect NAME VALUE campaigns in the election NAME with VALUE, prints a
line when elected (with the epoch: the leader's fencing token), stays
leader until interrupted (SIGINT, SIGTERM), then resigns and exits 0. If
leadership is lost first (the session could not reach etcd in time, or its
lease was revoked), it prints one line and exits 3.

dlock elect --observe NAME prints the current leader, then one line per
change ("leader VALUE epoch N", or "no leader"), until interrupted.

It talks to etcd: --endpoints (plaintext), or a DSN in --dsn or
$DLOCK_DSN (etcd://, or etcds:// for TLS with cacert, cert and key).
Candidates' keys live under <prefix>/election/NAME/.

Exit codes: 0 resigned or stopped observing, 1 error, 2 bad flags or
arguments, 3 leadership lost.`

func runElect(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "elect", "[flags] NAME VALUE | --observe NAME", electDescription)
	var conn connFlags
	conn.register(fs, e, true)
	observe := fs.Bool("observe", false, "print the leader and every change of leader, instead of campaigning")
	pos, err := parse(fs, args, true)
	if err != nil {
		return err
	}
	switch {
	case *observe && len(pos) != 1:
		return usageError("--observe takes one argument, the election's NAME; got %d", len(pos))
	case !*observe && len(pos) != 2:
		return usageError("want two arguments, NAME and VALUE; got %d", len(pos))
	}
	cfg, err := conn.config(fs)
	if err != nil {
		return err
	}
	// Check the name before connecting (elections use the lock name rules).
	if err := lock.ValidateName(pos[0]); err != nil {
		return usageError("%v", err)
	}

	client, err := open(ctx, cfg, connHint)
	if err != nil {
		return err
	}
	defer func() {
		// Revokes the session's lease: a term still held ends at once.
		cctx, cancel := cleanupContext(context.Background())
		defer cancel()
		client.Close(cctx)
	}()
	el, err := client.Election(pos[0])
	if err != nil {
		return usageError("%v", err)
	}
	if *observe {
		return observeElection(ctx, e, el)
	}
	return campaign(ctx, e, el, pos[0], pos[1])
}

func campaign(ctx context.Context, e *env, el *election.Election, name, value string) error {
	fmt.Fprintf(e.stdout, "campaigning in %q as %q\n", name, value)
	term, err := el.Campaign(ctx, value)
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted before being elected
		}
		return err
	}
	fmt.Fprintf(e.stdout, "elected: leader of %q with epoch %d (token %s); interrupt to resign\n", name, term.Epoch(), term.Token())
	select {
	case <-term.Done():
		return exitWith(exitLockLost, "leadership of %q lost: %v", name, term.Err())
	case <-ctx.Done():
	}
	rctx, cancel := cleanupContext(context.Background())
	defer cancel()
	if err := term.Resign(rctx); err != nil {
		if errors.Is(err, election.ErrLeadershipLost) {
			return exitWith(exitLockLost, "leadership of %q lost: %v", name, err)
		}
		return fmt.Errorf("resign: %w", err)
	}
	fmt.Fprintf(e.stdout, "resigned: epoch %d ended\n", term.Epoch())
	return nil
}

func observeElection(ctx context.Context, e *env, el *election.Election) error {
	for l := range el.Observe(ctx) {
		if l == (election.Leader{}) {
			fmt.Fprintf(e.stdout, "%s  no leader\n", time.Now().Format(time.TimeOnly))
			continue
		}
		fmt.Fprintf(e.stdout, "%s  leader %q epoch %d\n", time.Now().Format(time.TimeOnly), l.Value, l.Epoch)
	}
	if ctx.Err() == nil {
		return errors.New("observe ended unexpectedly")
	}
	return nil
}
