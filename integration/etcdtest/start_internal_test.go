package etcdtest

import (
	"net"
	"net/url"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A taken port is reported as EADDRINUSE, which Start retries on.
func TestTakenPortIsRetryable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	peer, err := freeAddr()
	require.NoError(t, err)
	m := &Member{
		name:      "m0",
		dir:       t.TempDir(),
		peerURL:   url.URL{Scheme: "http", Host: peer},
		clientURL: url.URL{Scheme: "http", Host: l.Addr().String()},
		cfg:       config{members: 1, tickMs: 50, electionMs: 500},
	}
	m.initial = "m0=" + m.peerURL.String()
	err = m.start("new")
	require.Error(t, err)
	assert.ErrorIs(t, err, syscall.EADDRINUSE)
}
