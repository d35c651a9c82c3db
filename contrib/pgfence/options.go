package pgfence

import (
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-go/dlock/internal/telemetry"
)

// DefaultTable is the fences table used when WithTable is not given.
const DefaultTable = "dlock_fences"

// Option configures a Guard.
type Option func(*options) error

type options struct {
	table []string // identifier parts: [table] or [schema, table]
	tel   telemetry.Config
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

// WithMeterProvider sets where the guard counts the tokens it rejects
// (dlock.fence.rejected, dlock.guard="postgres"). Optional, defaults to
// otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) error { o.tel.MeterProvider = mp; return nil }
}

// WithTracerProvider sets where the guard's spans go (one per guarded
// write, with the token and the result). Optional, defaults to
// otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) error { o.tel.TracerProvider = tp; return nil }
}
