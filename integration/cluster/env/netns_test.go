package env

import (
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// dial tries a TCP connection from host h to addr, with a timeout: true
// if it connected.
func dial(t *testing.T, h *Host, addr string) bool {
	t.Helper()
	code := "import socket,sys\ns=socket.create_connection(('" + strings.ReplaceAll(addr, ":", "',") + "),timeout=1)\n"
	return exec.Command("ip", "netns", "exec", h.NS, "python3", "-c", code).Run() == nil
}

// TestNet checks the network the faults rely on: hosts reach each other
// and the test process reaches them; Drop cuts two hosts apart both ways,
// DropOneWay one way, Heal restores them; without the admin link nothing
// is sent to the subnet; Close leaves no namespace and no route.
func TestNet(t *testing.T) {
	Need(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found")
	}
	nt, err := NewNet()
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			nt.Close()
		}
	}()
	a, err := nt.AddHost("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := nt.AddHost("b")
	if err != nil {
		t.Fatal(err)
	}
	srv := serveHTTP(t, a)
	defer srv.Kill()
	checkDrops(t, nt, a, b)
	checkNetClose(t, nt, a, srv)
	closed = true
}

// serveHTTP starts an HTTP server on host a (port 8000) and waits until
// the test process reaches it.
func serveHTTP(t *testing.T, a *Host) *Proc {
	t.Helper()
	srv, err := StartProc(a, "http", t.TempDir()+"/http.log", nil, nil, "python3", "-m", "http.server", "--bind", a.IP, "8000")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + a.IP + ":8000/"
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := (&http.Client{Timeout: time.Second}).Get(url)
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the test process cannot reach %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a server's start: nothing to watch
	}
	return srv
}

// checkDrops checks that b reaches a's server, and that Drop and
// DropOneWay(b, a) cut it off until Heal.
func checkDrops(t *testing.T, nt *Net, a, b *Host) {
	t.Helper()
	if !dial(t, b, a.IP+":8000") {
		t.Fatal("b cannot reach a before any fault")
	}
	if err := nt.Drop(a, b); err != nil {
		t.Fatal(err)
	}
	if dial(t, b, a.IP+":8000") {
		t.Fatal("b reaches a through Drop")
	}
	if err := nt.Heal(); err != nil {
		t.Fatal(err)
	}
	if !dial(t, b, a.IP+":8000") {
		t.Fatal("b cannot reach a after Heal")
	}
	if err := nt.DropOneWay(b, a); err != nil {
		t.Fatal(err)
	}
	if dial(t, b, a.IP+":8000") {
		t.Fatal("b's packets reach a through DropOneWay(b, a)")
	}
	if err := nt.Heal(); err != nil {
		t.Fatal(err)
	}
}

// checkNetClose deletes nt's admin link and checks that the subnet is
// no longer routed, then closes nt (srv, on it, killed first) and checks
// that it leaves no route and no namespace.
func checkNetClose(t *testing.T, nt *Net, a *Host, srv *Proc) {
	t.Helper()
	// Without the admin link, traffic to the subnet must stop here, not
	// leave by the default route.
	if err := run([]string{"link", "del", nt.admin}); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "route", "get", a.IP).CombinedOutput(); err == nil {
		t.Fatalf("without its admin link the subnet is still routed: %s", out)
	}
	srv.Kill()
	if err := nt.Close(); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command("ip", "route", "show", nt.subnet+"0/24").Output(); len(out) > 0 {
		t.Errorf("route left after Close: %s", out)
	}
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), nt.prefix) {
			t.Errorf("namespace %s left after Close", e.Name())
		}
	}
}
