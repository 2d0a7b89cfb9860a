package servertls_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/servertls"
	"github.com/vmgate/vmgate/internal/servertls/servertlstest"

	"github.com/vmgate/vmgate/internal/testkit"
)

// serve runs an HTTPS server the way vmgate does (ServeTLS with Config) and
// returns its address. Its handler answers with the request's protocol.
func serve(t *testing.T, cert *servertls.Certificate) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{
		Handler:   http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) }),
		TLSConfig: servertls.Config(cert),
	}
	go hs.ServeTLS(ln, "", "")
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// client returns a client trusting roots, with a connection pool of its own.
func client(roots *x509.CertPool) *http.Client {
	tr := &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: roots}}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// get fetches https://addr/ and returns the protocol, the server's certificate and
// whether the connection was reused.
func get(t *testing.T, c *http.Client, addr string) (proto string, leaf *x509.Certificate, reused bool) {
	t.Helper()
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body), resp.TLS.PeerCertificates[0], reused
}

func TestServesHTTP2WithModernTLSOnly(t *testing.T) {
	t.Parallel()
	p := servertlstest.Write(t, t.TempDir(), "srv", "first")
	cert, err := servertls.Load(p.CertFile, p.KeyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cert)
	if proto, leaf, _ := get(t, client(p.Pool), addr); proto != "HTTP/2.0" || !leaf.Equal(p.Leaf) {
		t.Fatalf("got %s with certificate %s, want HTTP/2.0 with %s", proto, leaf.Subject, p.Leaf.Subject)
	}
	refused := map[string]*tls.Config{
		"TLS 1.1": {RootCAs: p.Pool, MaxVersion: tls.VersionTLS11},
		"TLS 1.2 CBC": {RootCAs: p.Pool, MaxVersion: tls.VersionTLS12,
			CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA}},
	}
	for name, cfg := range refused {
		conn, err := tls.Dial("tcp", addr, cfg)
		if err == nil {
			conn.Close()
			t.Errorf("%s: handshake succeeded", name)
		}
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: p.Pool, MaxVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS 1.2: %v", err)
	}
	defer conn.Close()
	if s := conn.ConnectionState().CipherSuite; s != tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 &&
		s != tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 && s != tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 {
		t.Fatalf("TLS 1.2 negotiated %s", tls.CipherSuiteName(s))
	}
}

// TestReloadWhenFilesChange: replacing both files (a rename over each, as renewal
// tools do) is noticed by the poll; a new connection gets the new certificate, a
// connection opened before keeps working with the old one.
func TestReloadWhenFilesChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := servertlstest.Write(t, dir, "srv", "first")
	cert, err := servertls.Load(first.CertFile, first.KeyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cert.Watch(ctx, 10*time.Millisecond, nil)
	addr := serve(t, cert)
	old := client(first.Pool)
	if _, leaf, _ := get(t, old, addr); !leaf.Equal(first.Leaf) {
		t.Fatal("not the first certificate")
	}

	second := servertlstest.Write(t, dir, "srv", "second")
	roots := x509.NewCertPool()
	roots.AddCert(first.Leaf)
	roots.AddCert(second.Leaf)
	testkit.Until(t, "a new connection to see the second certificate", func() bool {
		c := client(roots)
		defer c.CloseIdleConnections()
		_, leaf, _ := get(t, c, addr)
		return servertls.Fingerprint(leaf) == servertls.Fingerprint(second.Leaf)
	})
	proto, leaf, reused := get(t, old, addr)
	if !reused || !leaf.Equal(first.Leaf) || proto != "HTTP/2.0" {
		t.Fatalf("old connection: reused %v, certificate %s, %s; want reused, first, HTTP/2.0", reused, leaf.Subject, proto)
	}
}

// TestSIGHUPReloads: a signal reloads at once, without waiting for the poll.
func TestSIGHUPReloads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := servertlstest.Write(t, dir, "srv", "first")
	cert, err := servertls.Load(first.CertFile, first.KeyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	hup := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cert.Watch(ctx, time.Hour, hup)
	second := servertlstest.Write(t, dir, "srv", "second")
	hup <- os.Interrupt // any value: the channel is what SIGHUP is delivered to
	testkit.Until(t, "the second certificate", func() bool { return cert.Leaf().Equal(second.Leaf) })
}

// TestBrokenPairKeepsCurrent: a certificate whose key is not there yet, a key of
// another certificate or a missing file leave the current pair serving; the pair
// loads once it is whole, once.
func TestBrokenPairKeepsCurrent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := servertlstest.Write(t, dir, "srv", "first")
	cert, err := servertls.Load(first.CertFile, first.KeyFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	other := servertlstest.Write(t, t.TempDir(), "other", "other")
	otherKey, _ := os.ReadFile(other.KeyFile)
	otherCert, _ := os.ReadFile(other.CertFile)

	servertlstest.WriteFile(t, first.CertFile, otherCert) // renewal wrote the certificate only
	if err := cert.Reload(); err == nil {
		t.Fatal("a certificate with the wrong key loaded")
	}
	if !cert.Leaf().Equal(first.Leaf) {
		t.Fatal("a failed reload replaced the certificate")
	}
	os.Remove(first.KeyFile)
	if err := cert.Reload(); err == nil || !cert.Leaf().Equal(first.Leaf) {
		t.Fatalf("a missing key: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go cert.Watch(ctx, 5*time.Millisecond, nil)
	loads := cert.Loads()
	servertlstest.WriteFile(t, first.KeyFile, []byte("not a key"))
	servertlstest.WriteFile(t, filepath.Join(dir, "unrelated"), []byte("x"))
	servertlstest.WriteFile(t, first.KeyFile, otherKey) // now the pair is whole
	testkit.Until(t, "the completed pair", func() bool { return cert.Leaf().Equal(other.Leaf) })
	if n := cert.Loads() - loads; n != 1 {
		t.Fatalf("%d loads after the pair was completed, want 1", n)
	}
}

func TestLoadFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := servertls.Load(filepath.Join(dir, "no.crt"), filepath.Join(dir, "no.key"), nil); err == nil {
		t.Fatal("missing files loaded")
	}
}
