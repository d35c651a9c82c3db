package pgfence

import (
	"fmt"
	"strings"

	"github.com/dlock-go/dlock/telemetry"
)

// DefaultTable is the fences table used when WithTable is not given.
const DefaultTable = "dlock_fences"

// Option configures a Guard.
type Option func(*options) error

type options struct {
	table []string // identifier parts: [table] or [schema, table]
	tel   telemetry.Providers
}

func defaults() options {
	return options{table: []string{DefaultTable}}
}

// WithTable sets the fences table: a PostgreSQL identifier "table" or
// "schema.table", each part 1 to 63 bytes of ASCII letters, digits and "_",
// not starting with a digit. Names are quoted, so they are case-sensitive.
// Optional, defaults to DefaultTable.
func WithTable(name string) Option {
	return func(o *options) error {
		parts := strings.Split(name, ".")
		if len(parts) > 2 {
			return fmt.Errorf("%w: WithTable(%q): want \"table\" or \"schema.table\"", ErrInvalidOption, name)
		}
		for _, p := range parts {
			if err := validIdent(p); err != nil {
				return fmt.Errorf("%w: WithTable(%q): %v", ErrInvalidOption, name, err)
			}
		}
		o.table = parts
		return nil
	}
}

func validIdent(s string) error {
	if s == "" {
		return fmt.Errorf("empty identifier")
	}
	if len(s) > 63 {
		return fmt.Errorf("identifier %q is longer than 63 bytes", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', c == '_':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return fmt.Errorf("identifier %q: byte %q at %d is not allowed", s, c, i)
		}
	}
	return nil
}

// WithTelemetry sets where the guard's metrics, spans and logs go (see
// package telemetry): dlock.fence.rejected (dlock.guard "postgres") with
// each rejected token logged at WARN, and a span per guarded write.
// Optional, defaults to the zero Providers: the global OpenTelemetry
// providers and no logs.
func WithTelemetry(p telemetry.Providers) Option {
	return func(o *options) error { o.tel = p; return nil }
}
