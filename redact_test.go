package dlock_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/dlock-go/dlock"
)

const secret = "s3cretPassw0rd"

// Printing a Config, in every verb and nested in a caller's struct, and
// logging it through slog, never shows its password.
func TestConfigPrintsNoPassword(t *testing.T) {
	t.Parallel()
	cfg := dlock.Config{
		Backend: dlock.BackendEtcd, Endpoints: []string{"10.0.0.1:2379"}, Prefix: "app",
		Username: "svc", Password: secret, TTL: 10 * time.Second,
		TLS: &tls.Config{ServerName: "etcd.example", Certificates: []tls.Certificate{{PrivateKey: secret}}},
	}
	type appConfig struct {
		Name string
		Lock dlock.Config
		Ptr  *dlock.Config
	}
	app := appConfig{Name: "svc", Lock: cfg, Ptr: &cfg}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%10v"} {
		for _, v := range []any{cfg, &cfg, app, &app} {
			out := fmt.Sprintf(verb, v)
			assert.NotContains(t, out, secret, "%s of %T", verb, v)
		}
	}
	assert.NotContains(t, fmt.Sprint(cfg), secret)
	assert.NotContains(t, fmt.Sprintln(cfg), secret)
	plus := fmt.Sprintf("%+v", cfg)
	assert.Contains(t, plus, "Password:xxxxx", "the password is named, redacted")
	assert.Contains(t, plus, "Username:svc", "the rest prints as usual")
	assert.Contains(t, fmt.Sprintf("%#v", cfg), `dlock.Config{Backend:"etcd"`)
	assert.Contains(t, plus, "TLS:&{ServerName:etcd.example Certificates:1}")

	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		var b bytes.Buffer
		slog.New(h(&b)).Info("starting", "dlock", cfg, "ptr", &cfg)
		assert.NotContains(t, b.String(), secret)
		assert.Contains(t, b.String(), "xxxxx")
		assert.Contains(t, b.String(), "etcd.example", "TLS is named by its server name")
	}
}

// ParseDSN's errors, for every kind of malformed DSN, never contain the
// password; neither do Open's.
func TestDSNErrorsShowNoPassword(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"etcd//user:" + secret + "@h:2379/p", // no scheme
		"etcdx://user:" + secret + "@h:2379/p",
		"etcd://user:" + secret + "%zz@h:2379/p", // bad escape in the password
		"etcd://user:%zz" + secret + "@h:2379/p",
		"etcd://user:" + secret + "@h:99999/p",
		"etcd://user:" + secret + "@h:2379/p?ttl=bad",
		"etcd://user:" + secret + "@h:2379/p?nope=1",
		"etcd://user:" + secret + "@h:2379/p?cacert=ca.pem",
		"etcd://user:" + secret + "@/p",
		"etcd://user:" + secret + "@h:2379,,h2/p",
		"etcd://user:" + secret + "@h:2379/p//",
		"etcd://user:" + secret + "@h:2379/p%x",
		"etcd://user:s3/cret" + secret + "@h:2379/p?ttl=1ms", // "/" unescaped in the password
		"etcd://user:a:b" + secret + "@h:2379/p?ttl=1ms",
		"redis://user:" + secret + "@h:6379,h2:6379/p",
		"redlock://user:" + secret + "@h1,h2/p",
		"redis+sentinel://user:" + secret + "@s1/p",
		"etcds://user:" + secret + "@h/p?cacert=/nonexistent/ca.pem",
	} {
		_, err := dlock.ParseDSN(dsn)
		if assert.Error(t, err, dsn) {
			assert.NotContains(t, err.Error(), secret, dsn)
			assert.NotContains(t, err.Error(), "cret", dsn)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, cfg := range []dlock.Config{
		{Backend: dlock.BackendEtcd, Endpoints: []string{"127.0.0.1:1"}, Username: "u", Password: secret, DialTimeout: 500 * time.Millisecond},
		{Backend: dlock.BackendRedis, Endpoints: []string{"127.0.0.1:1"}, Username: "u", Password: secret, DialTimeout: 500 * time.Millisecond},
		{Backend: dlock.BackendEtcd, Endpoints: []string{"nohost"}, Password: secret},
	} {
		_, err := dlock.Open(ctx, cfg)
		if assert.Error(t, err) {
			assert.NotContains(t, err.Error(), secret)
		}
	}
}

// The Config printed by Format has Config's fields, in Config's order: a
// field added to Config must be added to its printed form.
func TestConfigViewHasConfigFields(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeFor[dlock.Config]()
	var want []string
	for i := range typ.NumField() {
		want = append(want, typ.Field(i).Name+":")
	}
	out := fmt.Sprintf("%+v", dlock.Config{})
	last := -1
	for _, f := range want {
		i := strings.Index(out, f)
		if assert.GreaterOrEqual(t, i, 0, "field %s printed", f) {
			assert.Greater(t, i, last, "field %s in order", f)
			last = i
		}
	}
}

// Format and LogValue print every field of Config but the password (and
// TLS's keys): a field added to Config is printed as it is unless redact.go
// says otherwise. This list makes adding one a decision: if the new field
// can hold a secret (a token, a key), redact it in Format and LogValue
// before adding it here.
func TestConfigFieldsReviewedForSecrets(t *testing.T) {
	t.Parallel()
	reviewed := []string{"Backend", "Endpoints", "Prefix", "TTL", "DialTimeout", "Username",
		"Password", "DB", "MasterName", "Cluster", "Replicas", "TLS", "MeterProvider", "TracerProvider", "Logger"}
	var fields []string
	for _, f := range reflect.VisibleFields(reflect.TypeFor[dlock.Config]()) {
		fields = append(fields, f.Name)
	}
	assert.Equal(t, reviewed, fields, "Config's fields changed: review redact.go for secrets, then this list")
}
