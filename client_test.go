package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/election"
	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/integration/tlstest"
	"github.com/dlock-go/dlock/intent"
	"github.com/dlock-go/dlock/lock"
	"github.com/dlock-go/dlock/session"
)

// A Client survives its session: a partition longer than the TTL loses the
// held lock (Done closes, Unlock reports the loss), and after healing the
// same Locker and a fresh Election work again, on a new session, with
// greater tokens. The recovery time (heal → next Lock granted) is logged.
func TestClientRecoversAfterPartition(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	p := c.NewProxy(t)
	ctx := etcdtest.Context(t)
	client, err := dlock.Open(ctx, dlock.Config{
		Backend: dlock.BackendEtcd, Endpoints: []string{p.Addr()}, Prefix: "recover", TTL: 2 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(p.Unblackhole) // before the Client's Close
	defer client.Close(ctx)
	l, err := client.Locker("jobs/one")
	require.NoError(t, err)
	h, err := l.Lock(ctx)
	require.NoError(t, err)
	first := h.Token()
	done := h.Done()

	p.Blackhole()
	cut := time.Now()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the held lock was not reported lost during the partition")
	}
	t.Logf("lock reported lost %v after the cut (TTL 2s)", time.Since(cut).Round(time.Millisecond))
	require.ErrorIs(t, h.Err(), lock.ErrLockLost)
	require.ErrorIs(t, h.Err(), session.ErrExpired)
	require.ErrorIs(t, h.Unlock(ctx), lock.ErrLockLost)

	// The server expires the old lease: another client sees the key go.
	other := c.Client(t)
	require.Eventually(t, func() bool {
		resp, err := other.Get(ctx, "recover/lock/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 0
	}, 10*time.Second, 50*time.Millisecond, "the old lease's key was not deleted") // polling etcd state: no event for "nothing left"

	p.Unblackhole()
	healed := time.Now()
	h2, err := l.Lock(ctx)
	require.NoError(t, err, "the same Locker after healing")
	recovery := time.Since(healed)
	t.Logf("recovery: heal → Lock granted on a new session in %v", recovery.Round(time.Millisecond))
	assert.Greater(t, h2.Token().Seq, first.Seq)
	require.NoError(t, h2.Unlock(ctx))

	el, err := client.Election("leader")
	require.NoError(t, err)
	term, err := el.Campaign(ctx, "me")
	require.NoError(t, err, "a fresh Election after healing")
	assert.Greater(t, term.Epoch(), first.Seq)
	require.NoError(t, term.Resign(ctx))
}

// Client.Election works on etcd and is unsupported on Redis.
func TestClientElection(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	ctx := etcdtest.Context(t)
	client, err := dlock.Open(ctx, dlock.Config{Backend: dlock.BackendEtcd, Endpoints: c.HostPorts(), Prefix: "app"})
	require.NoError(t, err)
	defer client.Close(ctx)
	el, err := client.Election("primary")
	require.NoError(t, err)
	obs := el.Observe(ctx)
	assert.Equal(t, election.Leader{}, <-obs)
	term, err := el.Campaign(ctx, "node-1")
	require.NoError(t, err)
	assert.Equal(t, int64(1), etcdtest.KeyCount(t, c.Client(t), "app/election/primary/"), "under the Client's prefix")
	assert.Equal(t, election.Leader{Value: "node-1", Epoch: term.Epoch()}, <-obs)
	require.NoError(t, term.Resign(ctx))
	_, err = client.Election("bad//name")
	assert.ErrorIs(t, err, election.ErrInvalidName)

	l, err := client.Locker("x", dlock.WithOwner("worker-7"))
	require.NoError(t, err)
	h, err := l.Lock(ctx)
	require.NoError(t, err)
	resp, err := c.Client(t).Get(ctx, h.(*lock.Grant).Key())
	require.NoError(t, err)
	require.Len(t, resp.Kvs, 1)
	assert.Equal(t, "worker-7", string(resp.Kvs[0].Value), "WithOwner")
	require.NoError(t, h.Unlock(ctx))
	_, err = client.Locker("x", dlock.WithOwner("has space"))
	assert.ErrorIs(t, err, lock.ErrInvalidOption)
}

// Client.Journal keeps its intents beside the Client's locks, fenced by
// their grants.
func TestClientJournal(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	ctx := etcdtest.Context(t)
	client, err := dlock.Open(ctx, dlock.Config{Backend: dlock.BackendEtcd, Endpoints: c.HostPorts(), Prefix: "app"})
	require.NoError(t, err)
	j, err := client.Journal()
	require.NoError(t, err)
	l, err := client.Locker("billing/eu")
	require.NoError(t, err)
	h, err := l.Lock(ctx)
	require.NoError(t, err)
	var got string
	require.NoError(t, j.Do(ctx, h, "charge/invoice-42", func(_ context.Context, key string) error { got = key; return nil }))
	assert.Equal(t, intent.Key("billing/eu", "charge/invoice-42", h.Token().Seq), got)
	assert.Equal(t, int64(2), etcdtest.KeyCount(t, c.Client(t), "app/lock/billing%2Feu!intent/"), "the mark and the record, beside the lock")
	require.NoError(t, h.Unlock(ctx))
	require.NoError(t, client.Close(ctx))
	_, err = client.Journal()
	assert.ErrorIs(t, err, dlock.ErrClosed)
}

// Mutual TLS against embedded etcd, with certificates made in the test:
// through a DSN and through Config.TLS. A plaintext client at the TLS
// server, a client without its certificate, one that does not trust the
// server's CA, and a TLS client at a plaintext server all fail within the
// dial timeout, saying why.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	certs := tlstest.New(t)
	c := etcdtest.New(t, etcdtest.WithTLS(certs, true))
	plain := etcdtest.New(t)
	hp := c.HostPorts()[0]
	ctx := etcdtest.Context(t)
	files := "cacert=" + certs.CA + "&cert=" + certs.ClientCert + "&key=" + certs.ClientKey

	use := func(t *testing.T, cfg dlock.Config) {
		t.Helper()
		client, err := dlock.Open(ctx, cfg)
		require.NoError(t, err)
		defer client.Close(ctx)
		l, err := client.Locker("tls")
		require.NoError(t, err)
		require.NoError(t, lock.Do(ctx, l, func(context.Context, lock.Held) error { return nil }))
		el, err := client.Election("tls")
		require.NoError(t, err)
		term, err := el.Campaign(ctx, "me")
		require.NoError(t, err)
		require.NoError(t, term.Resign(ctx))
	}
	t.Run("dsn", func(t *testing.T) {
		cfg, err := dlock.ParseDSN("etcds://" + hp + "/app?" + files)
		require.NoError(t, err)
		use(t, cfg)
	})
	t.Run("dsn with server_name", func(t *testing.T) {
		// The certificate is for localhost and 127.0.0.1: dial by IP,
		// verify the name.
		cfg, err := dlock.ParseDSN("etcds://" + hp + "/app?server_name=" + tlstest.ServerName + "&" + files)
		require.NoError(t, err)
		use(t, cfg)
	})
	t.Run("config", func(t *testing.T) {
		use(t, dlock.Config{Backend: dlock.BackendEtcd, Endpoints: []string{hp}, TLS: certs.ClientConfig()})
	})

	const dial = 2 * time.Second
	for _, tc := range []struct {
		name, dsn, says string
	}{
		{"plaintext client, TLS server", "etcd://" + hp, "speaks TLS"},
		{"no client certificate", "etcds://" + hp + "?cacert=" + certs.CA, "client certificate"},
		{"untrusted server", "etcds://" + hp + "?cacert=" + certs.OtherCA + "&cert=" + certs.ClientCert + "&key=" + certs.ClientKey, "not signed by a CA this client trusts"},
		{"TLS client, plaintext server", "etcds://" + plain.HostPorts()[0] + "?" + files, "speaks plaintext"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each waits out its dial timeout
			cfg, err := dlock.ParseDSN(tc.dsn + sep(tc.dsn) + "dial_timeout=" + dial.String())
			require.NoError(t, err)
			start := time.Now()
			_, err = dlock.Open(ctx, cfg)
			took := time.Since(start)
			require.Error(t, err)
			t.Logf("%v after %v", err, took.Round(time.Millisecond))
			assert.ErrorContains(t, err, tc.says)
			// Within the dial timeout (a margin for a loaded machine), not a hang.
			assert.Less(t, took, dial+time.Second)
		})
	}
}

// server_name is the name checked against the server's certificate when
// dialling by IP, on etcd as on Redis: against a certificate that names
// etcd.example only (no IP address), the right name connects and a wrong
// one, or none, is refused; a Config.TLS with ServerName does the same.
func TestEtcdServerName(t *testing.T) {
	t.Parallel()
	certs := tlstest.New(t).NameOnly(t)
	c := etcdtest.New(t, etcdtest.WithTLS(certs, false))
	hp := c.HostPorts()[0] // 127.0.0.1:port
	ctx := etcdtest.Context(t)
	open := func(t *testing.T, cfg dlock.Config) error {
		t.Helper()
		client, err := dlock.Open(ctx, cfg)
		if err != nil {
			return err
		}
		defer client.Close(ctx)
		l, err := client.Locker("named")
		require.NoError(t, err)
		return lock.Do(ctx, l, func(context.Context, lock.Held) error { return nil })
	}
	dsn := func(t *testing.T, q string) dlock.Config {
		cfg, err := dlock.ParseDSN("etcds://" + hp + "/app?dial_timeout=2s&cacert=" + certs.CA + "&cert=" + certs.ClientCert + "&key=" + certs.ClientKey + q)
		require.NoError(t, err)
		return cfg
	}
	t.Run("right name", func(t *testing.T) {
		require.NoError(t, open(t, dsn(t, "&server_name="+tlstest.NamedServerName)))
	})
	// The refusals each wait out the dial timeout: in parallel.
	t.Run("wrong name", func(t *testing.T) {
		t.Parallel()
		err := open(t, dsn(t, "&server_name=other.example"))
		require.Error(t, err, "a certificate that does not name other.example is refused")
		assert.ErrorContains(t, err, "other.example")
	})
	t.Run("no name", func(t *testing.T) {
		t.Parallel()
		require.Error(t, open(t, dsn(t, "")), "dialling by IP, the certificate names no IP")
	})
	t.Run("wrong name, certificate for the IP", func(t *testing.T) {
		// The name is checked even where the IP alone would pass.
		t.Parallel()
		std := tlstest.New(t)
		ipc := etcdtest.New(t, etcdtest.WithTLS(std, false))
		cfg, err := dlock.ParseDSN("etcds://" + ipc.HostPorts()[0] + "/app?dial_timeout=2s&server_name=other.example&cacert=" +
			std.CA + "&cert=" + std.ClientCert + "&key=" + std.ClientKey)
		require.NoError(t, err)
		require.Error(t, open(t, cfg), "a certificate that does not name other.example is refused")
	})
	t.Run("config", func(t *testing.T) {
		cfg := dlock.Config{Backend: dlock.BackendEtcd, Endpoints: []string{hp}, DialTimeout: 2 * time.Second, TLS: certs.ClientConfig()}
		require.NoError(t, open(t, cfg))
		cfg.TLS.ServerName = "other.example"
		require.Error(t, open(t, cfg))
	})
}

func sep(dsn string) string {
	if strings.Contains(dsn, "?") {
		return "&"
	}
	return "?"
}

// etcd auth: a user whose role grants readwrite on the Client's prefix
// alone can lock, TryLock, campaign and observe; a Client on another prefix
// is denied with an error that names the permission it lacks.
func TestAuthLimitedToPrefix(t *testing.T) {
	t.Parallel()
	c := etcdtest.New(t)
	ctx := etcdtest.Context(t)
	root := c.Client(t)
	for _, step := range []func() error{
		func() error { _, err := root.RoleAdd(ctx, "root"); return err },
		func() error { _, err := root.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.RoleAdd(ctx, "app"); return err },
		// The README's line: etcdctl role grant-permission app readwrite --prefix=true app/
		func() error {
			_, err := root.RoleGrantPermission(ctx, "app", "app/", clientv3.GetPrefixRangeEnd("app/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, "app", "apppw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "app", "app"); return err },
		func() error { _, err := root.AuthEnable(ctx); return err },
	} {
		require.NoError(t, step())
	}
	hp := c.HostPorts()[0]
	cfg, err := dlock.ParseDSN("etcd://app:apppw@" + hp + "/app?ttl=5s")
	require.NoError(t, err)
	client, err := dlock.Open(ctx, cfg)
	require.NoError(t, err)
	defer client.Close(ctx)

	l, err := client.Locker("jobs/a")
	require.NoError(t, err)
	h, err := l.Lock(ctx)
	require.NoError(t, err, "Lock under the permitted prefix")
	_, err = l.TryLock(ctx)
	assert.ErrorIs(t, err, lock.ErrLocked)
	require.NoError(t, h.Unlock(ctx))
	h, err = l.TryLock(ctx)
	require.NoError(t, err, "TryLock under the permitted prefix")
	require.NoError(t, h.Unlock(ctx))

	el, err := client.Election("leader")
	require.NoError(t, err)
	obs := el.Observe(ctx)
	assert.Equal(t, election.Leader{}, <-obs)
	term, err := el.Campaign(ctx, "me")
	require.NoError(t, err, "Campaign under the permitted prefix")
	assert.Equal(t, election.Leader{Value: "me", Epoch: term.Epoch()}, <-obs, "Observe under the permitted prefix")
	require.NoError(t, term.Resign(ctx))

	cfg.Prefix = "other"
	denied, err := dlock.Open(ctx, cfg)
	require.NoError(t, err, "a session needs no key permission")
	defer denied.Close(ctx)
	dl, err := denied.Locker("jobs/a")
	require.NoError(t, err)
	_, err = dl.Lock(ctx)
	require.Error(t, err)
	t.Log(err)
	assert.ErrorContains(t, err, "permission denied")
	assert.ErrorContains(t, err, `readwrite permission on the keys with prefix "other/lock/"`)
	del, err := denied.Election("leader")
	require.NoError(t, err)
	_, err = del.Campaign(ctx, "me")
	assert.ErrorContains(t, err, `readwrite permission on the keys with prefix "other/election/"`)

	bad, err := dlock.ParseDSN("etcd://app:wr0ngPassw0rd@" + hp + "/app")
	require.NoError(t, err)
	_, err = dlock.Open(ctx, bad)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "wr0ngPassw0rd", "a failed login does not print the password")
	assert.True(t, strings.Contains(err.Error(), "authentication failed") || errors.Is(err, context.DeadlineExceeded), "%v", err)
}
