// Package tlstest makes a throwaway certificate authority for tests: a CA,
// a server certificate for localhost and 127.0.0.1 (and ::1), and a client
// certificate, written as PEM files to a temporary directory, like the
// files an operator hands to etcdctl (--cacert, --cert, --key).
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Certs are the PEM files of one throwaway CA and its two certificates.
type Certs struct {
	Dir        string
	CA         string // the CA certificate
	ServerCert string // for localhost, 127.0.0.1, ::1
	ServerKey  string
	ClientCert string // CN "dlock-test-client"
	ClientKey  string
	// OtherCA is a second CA that signed nothing here: trusting it alone
	// must fail the handshake.
	OtherCA string

	client *tls.Config
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
}

// ServerName is the name the server certificate is issued for.
const ServerName = "localhost"

// New generates the certificates into t.TempDir().
func New(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	c := &Certs{Dir: dir}
	ca, caKey := selfSigned(t, "dlock-test-ca")
	c.ca, c.caKey = ca, caKey
	c.CA = write(t, dir, "ca.pem", "CERTIFICATE", ca.Raw)
	other, _ := selfSigned(t, "dlock-test-other-ca")
	c.OtherCA = write(t, dir, "other-ca.pem", "CERTIFICATE", other.Raw)

	srv, srvKey := issue(t, ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: ServerName},
		DNSNames:    []string{ServerName},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	c.ServerCert = write(t, dir, "server.pem", "CERTIFICATE", srv)
	c.ServerKey = write(t, dir, "server-key.pem", "EC PRIVATE KEY", srvKey)
	cli, cliKey := issue(t, ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "dlock-test-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	c.ClientCert = write(t, dir, "client.pem", "CERTIFICATE", cli)
	c.ClientKey = write(t, dir, "client-key.pem", "EC PRIVATE KEY", cliKey)

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	pair, err := tls.LoadX509KeyPair(c.ClientCert, c.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	c.client = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, ServerName: ServerName, MinVersion: tls.VersionTLS12}
	return c
}

// NamedServerName is the one name of NameOnly's server certificate.
const NamedServerName = "etcd.example"

// NameOnly returns a copy of c whose server certificate, signed by the same
// CA, names NamedServerName only, without IP addresses: a client that dials
// by IP must be told that name (server_name) to accept it.
func (c *Certs) NameOnly(t testing.TB) *Certs {
	t.Helper()
	n := *c
	srv, srvKey := issue(t, c.ca, c.caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: NamedServerName},
		DNSNames:    []string{NamedServerName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	n.ServerCert = write(t, c.Dir, "named-server.pem", "CERTIFICATE", srv)
	n.ServerKey = write(t, c.Dir, "named-server-key.pem", "EC PRIVATE KEY", srvKey)
	n.client = c.client.Clone()
	n.client.ServerName = NamedServerName
	return &n
}

// ClientConfig returns a tls.Config that trusts the CA and presents the
// client certificate.
func (c *Certs) ClientConfig() *tls.Config { return c.client.Clone() }

var serial int64

func template(cn string) *x509.Certificate {
	serial++
	return &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano() + serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
}

func selfSigned(t testing.TB, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key := newKey(t)
	tpl := template(cn)
	tpl.IsCA, tpl.BasicConstraintsValid = true, true
	tpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func issue(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, spec *x509.Certificate) (der, keyDER []byte) {
	t.Helper()
	key := newKey(t)
	tpl := template(spec.Subject.CommonName)
	tpl.DNSNames, tpl.IPAddresses, tpl.ExtKeyUsage = spec.DNSNames, spec.IPAddresses, spec.ExtKeyUsage
	tpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err = x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return der, keyDER
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func write(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
