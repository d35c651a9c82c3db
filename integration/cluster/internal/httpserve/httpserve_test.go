package httpserve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun: Run serves until its ctx ends (nil) or failed yields an error
// (that error), and lets a request under way finish.
func TestRun(t *testing.T) {
	var started, release chan struct{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release // under way when Run is told to stop
		w.Write([]byte("done"))
	})
	for name, stop := range map[string]func(cancel context.CancelFunc, failed chan error) error{
		"ctx": func(cancel context.CancelFunc, _ chan error) error { cancel(); return nil },
		"failed": func(_ context.CancelFunc, failed chan error) error {
			err := errors.New("log: disk full")
			failed <- err
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			started, release = make(chan struct{}), make(chan struct{})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			failed := make(chan error, 1)
			ran := make(chan error, 1)
			go func() { ran <- Run(ctx, ln, h, failed, 5*time.Second) }()
			cli := &http.Client{Transport: &http.Transport{}}
			defer cli.CloseIdleConnections()
			got := make(chan error, 1)
			go func() {
				resp, err := cli.Get("http://" + ln.Addr().String())
				if err == nil {
					resp.Body.Close()
				}
				got <- err
			}()
			<-started
			want := stop(cancel, failed)
			close(release)
			assert.NoError(t, <-got, "the request under way was answered")
			assert.Equal(t, want, <-ran)
		})
	}
}
