package pve

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	testTokenID = "vmgate@pve!gw"
	testSecret  = "0d0e8d2a-1c3f-4a8e-9d55-2f6b7c9e1a40"
)

// testCert makes a certificate for 127.0.0.1 / localhost, signed by parent
// (self-signed when parent is nil).
func testCert(t testing.TB, parent *tls.Certificate, isCA bool) tls.Certificate {
	t.Helper()
	return testCertFor(t, parent, isCA, []net.IP{net.IPv4(127, 0, 0, 1)})
}

// testCertFor makes a certificate for localhost and the given addresses.
func testCertFor(t testing.TB, parent *tls.Certificate, isCA bool, ips []net.IP) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "pve test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		DNSNames:              []string{"localhost"},
		IPAddresses:           ips,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  isCA,
	}
	signer, signerKey := tmpl, any(key)
	if parent != nil {
		signer, signerKey = parent.Leaf, parent.PrivateKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

func certPEM(c tls.Certificate) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}))
}

// fakePVE is an HTTPS server with its own certificate that counts requests.
type fakePVE struct {
	*httptest.Server
	cert tls.Certificate
	fp   string

	mu   sync.Mutex
	hits map[string]int // "METHOD /path"
}

func newFakePVE(t testing.TB, h http.HandlerFunc) *fakePVE {
	t.Helper()
	return newFakePVEWithCert(t, testCert(t, nil, false), h)
}

func newFakePVEWithCert(t testing.TB, cert tls.Certificate, h http.HandlerFunc) *fakePVE {
	t.Helper()
	f := &fakePVE{cert: cert, fp: Fingerprint(cert.Certificate[0]), hits: map[string]int{}}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.hits[r.Method+" "+r.URL.EscapedPath()]++
		f.mu.Unlock()
		h(w, r)
	}))
	f.Server.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	f.Server.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are expected
	f.Server.StartTLS()
	t.Cleanup(f.Server.Close)
	return f
}

func (f *fakePVE) endpoint() Endpoint { return Endpoint{URL: f.URL, Fingerprint: f.fp} }

func (f *fakePVE) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[key]
}

func (f *fakePVE) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, v := range f.hits {
		n += v
	}
	return n
}

// writeData answers like PVE's JSON formatter.
func writeData(w http.ResponseWriter, data any, extra ...any) {
	body := map[string]any{"data": data}
	for i := 0; i+1 < len(extra); i += 2 {
		body[extra[i].(string)] = extra[i+1]
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.Header().Set("Server", "pve-api-daemon/3.0")
	_ = json.NewEncoder(w).Encode(body)
}

// dropConn closes the connection without an answer.
func dropConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

// rawPVE is a TLS server that writes HTTP/1.1 answers byte by byte, for what
// net/http's server cannot say: custom reason phrases ("401 No ticket"),
// pseudo-statuses with empty bodies ("595 No route to host").
type rawPVE struct {
	url, fp string
	reqs    atomic.Int64
	conns   atomic.Int64
}

// newRawPVE serves each request with respond's bytes; a "Connection: close"
// answer closes the connection after it is written.
func newRawPVE(t testing.TB, respond func(r *http.Request) string) *rawPVE {
	t.Helper()
	cert := testCert(t, nil, false)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	s := &rawPVE{url: "https://" + ln.Addr().String(), fp: Fingerprint(cert.Certificate[0])}
	var wg sync.WaitGroup
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				go func() { <-done; conn.Close() }()
				br := bufio.NewReader(conn)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					s.reqs.Add(1)
					resp := respond(req)
					if _, err := io.WriteString(conn, resp); err != nil {
						return
					}
					if strings.Contains(strings.ToLower(resp), "connection: close") {
						return
					}
				}
			}()
		}
	}()
	return s
}

func (s *rawPVE) endpoint() Endpoint { return Endpoint{URL: s.url, Fingerprint: s.fp} }

// rawAnswer builds a PVE-style answer; an empty body gets no Content-Length
// when close is set (the body ends with the connection, as PVE's 401s do).
func rawAnswer(statusLine, body string, close bool) string {
	var b strings.Builder
	b.WriteString("HTTP/1.1 " + statusLine + "\r\n")
	b.WriteString("Server: pve-api-daemon/3.0\r\n")
	if body != "" {
		b.WriteString("Content-Type: application/json;charset=UTF-8\r\n")
	}
	if body != "" || !close {
		b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	}
	if close {
		b.WriteString("Connection: close\r\n")
	} else {
		b.WriteString("Connection: Keep-Alive\r\n")
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	return b.String()
}

// deadAddr returns an https URL on which nothing listens.
func deadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "https://" + addr
}

// testClock is a settable clock.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newTestClient builds a client with instant backoff and a fixed clock unless
// cfg sets them.
func newTestClient(t testing.TB, cfg Config) *Client {
	t.Helper()
	if cfg.TokenID == "" {
		cfg.TokenID = testTokenID
	}
	if cfg.TokenSecret == "" {
		cfg.TokenSecret = testSecret
	}
	if cfg.Backoff == nil {
		cfg.Backoff = func(int) time.Duration { return 0 }
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

const testUPID = "UPID:pve1:0003A1B2:0129F3C4:66B1E7F0:qmstart:100:vmgate@pve!gw:"
