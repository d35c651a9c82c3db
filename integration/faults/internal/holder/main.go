// Command holder is the lock holder of the fault suite, run as a child
// process so that the test can stop it with SIGSTOP and resume it with
// SIGCONT: a real process pause.
//
// It opens a session with -ttl on the etcd cluster at -endpoints, calls Lock
// on -name and reports the outcome on stdout, one line each:
//
//	TOKEN <seq>         granted
//	ERR <error>         Lock failed (then it exits 0)
//
// It then waits for a line on stdin and writes "<-value>" to -resource (an
// HTTP endpoint), presenting its fencing token in the httpfence header, and
// reports the HTTP status:
//
//	WROTE <status>
//
// With -check-done it first looks at its grant: if the session's local
// deadline has passed (or Held.Done is closed) it waits for Done and reports
//
//	LOST <error>
//
// instead of writing. It exits when stdin closes or after -timeout.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlock-go/dlock/contrib/httpfence"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

func main() {
	endpoints := flag.String("endpoints", "", "comma-separated etcd endpoints")
	name := flag.String("name", "faults", "lock name")
	ttl := flag.Duration("ttl", 2*time.Second, "session TTL")
	resource := flag.String("resource", "", "URL to POST the write to")
	value := flag.String("value", "child", "value to write")
	checkDone := flag.Bool("check-done", false, "check the grant's Done before writing")
	timeout := flag.Duration("timeout", 2*time.Minute, "exit after this long")
	flag.Parse()
	if err := run(*endpoints, *name, *ttl, *resource, *value, *checkDone, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(1)
	}
}

func run(endpoints, name string, ttl time.Duration, resource, value string, checkDone bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(endpoints, ","),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return err
	}
	defer cli.Close()
	s, err := session.New(ctx, cli, session.WithTTL(ttl))
	if err != nil {
		return err
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = s.Close(cctx)
	}()
	m, err := lock.New(s, name)
	if err != nil {
		return err
	}
	h, err := m.Lock(ctx)
	if err != nil {
		fmt.Printf("ERR %v\n", err)
		return nil
	}
	fmt.Printf("TOKEN %d\n", h.Token().Seq)

	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return nil
	}
	if checkDone {
		// Done is the signal; the deadline is exact. A process that was
		// stopped past its deadline has not run the timer that closes Done
		// yet, so it checks the deadline and then waits for Done.
		if !time.Now().Before(s.Deadline()) {
			select {
			case <-h.Done():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		select {
		case <-h.Done():
			fmt.Printf("LOST %v\n", h.Err())
			return nil
		default:
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, resource, strings.NewReader(value))
	if err != nil {
		return err
	}
	if err := httpfence.SetHeader(req.Header, h.Token()); err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	fmt.Printf("WROTE %d\n", resp.StatusCode)
	in.Scan() // wait for stdin to close
	return nil
}
