// Package httpserve runs the HTTP servers of the cluster harness's
// commands (cmd/resource, cmd/payments) the one way they all run.
package httpserve

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Run serves h on ln, prints "LISTEN <addr>" on stdout once it accepts
// connections (the harness waits for the line), and returns when ctx
// ends (nil), when serving fails, or when failed yields an error (the
// command's evidence is broken: a log it cannot write). It shuts the
// server down first, letting the requests under way finish within grace.
func Run(ctx context.Context, ln net.Listener, h http.Handler, failed <-chan error, grace time.Duration) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Printf("LISTEN %s\n", ln.Addr())
	var err error
	select {
	case <-ctx.Done():
	case err = <-served:
	case err = <-failed:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	if e := srv.Shutdown(sctx); err == nil && e != nil {
		err = e
	}
	return err
}
