package dlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/integration/etcdtest"
	"github.com/dlock-go/dlock/integration/redistest"
)

// Open's diagnosis of an endpoint where nothing listens is the same with
// credentials in the DSN as without, and names the endpoint (etcd's
// client logs in before Open's session starts, within the same share of
// the dial timeout).
func TestOpenDiagnosisWithCredentials(t *testing.T) {
	t.Parallel()
	ep := etcdtest.FreeAddr(t) // free a moment ago: nothing listens there
	why := func(dsn string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		_, err := dlock.Open(ctx, mustParse(t, dsn))
		require.Error(t, err, dsn)
		t.Log(err)
		msg := err.Error()
		assert.Contains(t, msg, "dlock: etcd ["+ep+"]: ", "names the endpoint")
		assert.Contains(t, msg, "("+ep+" does not accept connections: ", "diagnosed")
		assert.NotContains(t, msg, "s3cret")
		return msg[strings.LastIndex(msg, "("):]
	}
	plain := why("etcd://" + ep + "?dial_timeout=1s")
	withCreds := why("etcd://u:s3cret@" + ep + "?dial_timeout=1s")
	assert.Equal(t, plain, withCreds, "the same diagnosis")
}

// A DSN of one backend aimed at the other's server says what it found
// there, with credentials or without; a single Redis node's failure is
// worded for one node, its cause printed once.
func TestOpenWrongBackend(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t)
	rs := redistest.Start(t)
	e, r := etcd.HostPorts()[0], rs.Addr()
	free := etcdtest.FreeAddr(t)
	for dsn, want := range map[string][]string{
		"redis://" + e:     {"dlock: redis: the node " + e + " does not answer: ", "(" + e + " speaks HTTP/2 (gRPC), as etcd does, not Redis: use etcd://)"},
		"redis://u:p@" + e: {"dlock: redis: the node " + e + " does not answer: ", "(" + e + " speaks HTTP/2 (gRPC), as etcd does, not Redis: use etcd://)"},
		"redlock://" + e + "," + r + "," + free: {"dlock: redlock: 1 of 3 nodes answer, need 2: ", e + ": ",
			"(" + e + " speaks HTTP/2 (gRPC), as etcd does, not Redis: use etcd://)", free + ": "},
		"etcd://" + r:     {"dlock: etcd [" + r + "]: session: grant lease: ", "(" + r + " is a Redis server, not etcd: use redis:// or redlock://)"},
		"etcd://u:p@" + r: {"dlock: etcd [" + r + "]: log in as \"u\": ", "(" + r + " is a Redis server, not etcd: use redis:// or redlock://)"},
		"redis://" + free: {"dlock: redis: the node " + free + " does not answer: "},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		_, err := dlock.Open(ctx, mustParse(t, dsn+"?dial_timeout=1s"))
		cancel()
		if !assert.Error(t, err, dsn) {
			continue
		}
		t.Log(err)
		for _, w := range want {
			assert.Contains(t, err.Error(), w, dsn)
		}
		assert.LessOrEqual(t, strings.Count(err.Error(), "connection refused"), 1, "%s: the cause once", dsn)
		assert.NotContains(t, err.Error(), "nodes answer, need 1", dsn)
	}
}
