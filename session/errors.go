package session

import (
	"errors"

	"github.com/dlock-go/dlock/internal/errs"
)

var (
	// ErrInvalidOption is returned by New for a bad option or a nil client;
	// the message names the field.
	ErrInvalidOption = errors.New("session: invalid option")

	// ErrClosed is reported by Err after Close.
	ErrClosed = errors.New("session: closed")

	// ErrExpired is reported by Err when the session's local deadline passed
	// without an acknowledged keepalive: the server may expire the lease any
	// moment now, so holders must stop acting. It is also reported when the
	// server says the lease is gone (ErrLeaseGone wraps it).
	ErrExpired = errors.New("session: expired")

	// ErrLeaseGone is reported by Err when the server reported the lease
	// missing (expired or revoked by someone else). It matches ErrExpired.
	ErrLeaseGone = errs.Also("session: lease gone on the server", ErrExpired)
)
