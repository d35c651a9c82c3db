package cluster

import (
	"context"
	"errors"
	"syscall"
)

// httpGuard is the "http" guard's server: the resource process itself,
// started with -guard http (its fenced register behind httpfence's
// Middleware, with a fence.MemoryGuard). Its log is the audit. It cannot
// be restarted: its marks are in memory.
type httpGuard struct{ h *Harness }

func (g httpGuard) DSN() string { return g.h.resURL }

func (g httpGuard) Start(context.Context) error {
	return errors.New("http guard: the resource cannot be restarted (its marks are in memory)")
}

func (g httpGuard) Kill() { g.h.Resource.Kill() }

func (g httpGuard) Signal(sig syscall.Signal) error { return g.h.Resource.Signal(sig) }

func (g httpGuard) collect(context.Context) error { return nil }
