package dlock

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// redacted replaces a password wherever dlock prints one, as
// net/url.URL.Redacted does.
const redacted = "xxxxx"

// Format prints c as fmt would print its fields, in every verb (%v, %+v,
// %#v, %s, ...), with the password replaced by "xxxxx" and TLS by its
// server name and the number of its client certificates, never their keys.
// A Config is what services log at start-up: printing one is safe.
func (c Config) Format(f fmt.State, verb rune) {
	v := configView{
		Backend: c.Backend, Endpoints: c.Endpoints, Prefix: c.Prefix, TTL: c.TTL,
		DialTimeout: c.DialTimeout, Username: c.Username, DB: c.DB,
		MasterName: c.MasterName, Cluster: c.Cluster, TLS: tlsView{c.TLS},
		MeterProvider: c.MeterProvider, TracerProvider: c.TracerProvider, Logger: c.Logger,
	}
	if c.Password != "" {
		v.Password = redacted
	}
	switch verb {
	case 'v', 's':
	default:
		verb = 'v' // a verb that does not fit a struct would dump TLS
	}
	s := fmt.Sprintf(fmt.FormatString(f, verb), v)
	if f.Flag('#') {
		s = strings.Replace(s, "dlock.configView{", "dlock.Config{", 1)
	}
	fmt.Fprint(f, s)
}

// configView is Config as Format prints it: the same fields in the same
// order (a test checks), the secrets replaced.
type configView struct {
	Backend            string
	Endpoints          []string
	Prefix             string
	TTL                time.Duration
	DialTimeout        time.Duration
	Username, Password string
	DB                 int
	MasterName         string
	Cluster            bool
	TLS                tlsView
	MeterProvider      metric.MeterProvider
	TracerProvider     trace.TracerProvider
	Logger             *slog.Logger
}

// tlsView prints a *tls.Config by its server name and the number of its
// client certificates.
type tlsView struct{ c *tls.Config }

func (t tlsView) Format(f fmt.State, verb rune) {
	switch {
	case t.c == nil && f.Flag('#'):
		fmt.Fprint(f, "(*tls.Config)(nil)")
	case t.c == nil:
		fmt.Fprint(f, "<nil>")
	case f.Flag('#'):
		fmt.Fprintf(f, "&tls.Config{ServerName:%q, Certificates:%d}", t.c.ServerName, len(t.c.Certificates))
	default:
		fmt.Fprintf(f, "&{ServerName:%s Certificates:%d}", t.c.ServerName, len(t.c.Certificates))
	}
}

// LogValue makes a Config logged through log/slog a group of its settings,
// with the password replaced by "xxxxx" and TLS by its server name.
func (c Config) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("backend", c.Backend),
		slog.Any("endpoints", c.Endpoints),
		slog.String("prefix", c.Prefix),
		slog.Duration("ttl", c.TTL),
		slog.Duration("dial_timeout", c.DialTimeout),
	}
	if c.Username != "" {
		attrs = append(attrs, slog.String("username", c.Username))
	}
	if c.Password != "" {
		attrs = append(attrs, slog.String("password", redacted))
	}
	if c.DB != 0 {
		attrs = append(attrs, slog.Int("db", c.DB))
	}
	if c.MasterName != "" {
		attrs = append(attrs, slog.String("master_name", c.MasterName))
	}
	if c.Cluster {
		attrs = append(attrs, slog.Bool("cluster", true))
	}
	if c.TLS != nil {
		attrs = append(attrs, slog.Group("tls", slog.String("server_name", c.TLS.ServerName),
			slog.Bool("client_certificate", len(c.TLS.Certificates) > 0 || c.TLS.GetClientCertificate != nil)))
	}
	return slog.GroupValue(attrs...)
}

// userinfo splits a DSN's text after the scheme into its user information
// (before the last "@" ahead of the query) and the rest; ok is false if
// there is none. A password may hold "/" or ":" unescaped: everything up to
// that "@" is user information, so that no part of a password is read as a
// host or a prefix (and printed in an error).
func userinfo(s string) (info, rest string, ok bool) {
	end := len(s)
	if q := strings.IndexByte(s, '?'); q >= 0 {
		end = q
	}
	at := strings.LastIndexByte(s[:end], '@')
	if at < 0 {
		return "", s, false
	}
	return s[:at], s[at+1:], true
}

// RedactDSN returns dsn with its password, if any, replaced by "xxxxx", as
// net/url.URL.Redacted does, for logs and messages. It works on malformed
// DSNs too; ParseDSN's errors quote a DSN only this way.
func RedactDSN(dsn string) string {
	head, rest := "", dsn
	if i := strings.Index(dsn, "://"); i >= 0 {
		head, rest = dsn[:i+3], dsn[i+3:]
	}
	info, after, ok := userinfo(rest)
	if !ok {
		return dsn
	}
	user, _, hasPass := strings.Cut(info, ":")
	if !hasPass {
		return dsn
	}
	return head + user + ":" + redacted + "@" + after
}
