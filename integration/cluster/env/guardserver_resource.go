package env

import (
	"context"
	"errors"
	"syscall"
)

// resourceGuard is the "http" and "grpc" guards' server: the resource
// process itself, started with -guard http (its fenced register behind
// httpfence's Middleware) or -guard grpc (behind grpcfence's
// interceptors), with a fence.MemoryGuard. Its log is the audit. It
// cannot be restarted: its marks are in memory.
type resourceGuard struct {
	h   *Harness
	dsn string // the resource's URL (http), or its gRPC address
}

func (g resourceGuard) DSN() string { return g.dsn }

func (g resourceGuard) Start(context.Context) error {
	return errors.New("the resource cannot be restarted (its marks are in memory)")
}

func (g resourceGuard) Kill() { g.h.Resource.Kill() }

func (g resourceGuard) Signal(sig syscall.Signal) error { return g.h.Resource.Signal(sig) }

func (g resourceGuard) Collect(context.Context) error { return nil }
