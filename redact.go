package dlock

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
)

// redacted replaces a password wherever dlock prints one, as
// net/url.URL.Redacted does.
const redacted = "xxxxx"

// Format prints c as fmt would print its fields, in every verb (%v, %+v,
// %#v, %s, ...), with the password replaced by "xxxxx" and TLS by its
// server name and the number of its client certificates, never their keys.
// A Config is what services log at start-up: printing one is safe.
func (c Config) Format(f fmt.State, verb rune) {
	switch verb {
	case 'v', 's':
	default:
		verb = 'v' // a verb that does not fit a struct would dump TLS
	}
	s := fmt.Sprintf(fmt.FormatString(f, verb), c.view())
	if f.Flag('#') {
		s = strings.Replace(s, viewType.String(), "dlock.Config", 1)
	}
	fmt.Fprint(f, s)
}

// viewType is the struct that Format prints for a Config: Config's own
// fields, in its order, with TLS as a tlsView.
var viewType = func() reflect.Type {
	fields := reflect.VisibleFields(reflect.TypeFor[Config]())
	for i := range fields {
		if fields[i].Name == "TLS" {
			fields[i].Type = reflect.TypeFor[tlsView]()
		}
	}
	return reflect.StructOf(fields)
}()

// view returns c as a viewType, the password replaced.
func (c Config) view() any {
	v, cv := reflect.New(viewType).Elem(), reflect.ValueOf(c)
	for i := range v.NumField() {
		switch viewType.Field(i).Name {
		case "TLS":
			v.Field(i).Set(reflect.ValueOf(tlsView{c.TLS}))
		case "Password":
			if c.Password != "" {
				v.Field(i).SetString(redacted)
			}
		default:
			v.Field(i).Set(cv.Field(i))
		}
	}
	return v.Interface()
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
