package notify_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/testkit"
)

// admin is the caller of the targets' use cases in these tests.
var admin = fleet.Actor{UserID: 1, Email: "admin@example.org", Role: store.RoleAdmin}

// start is the tests' clock's first reading.
var start = time.Date(2031, 5, 6, 7, 0, 0, 0, time.UTC)

type env struct {
	t      *testing.T
	st     store.Store
	clock  *testkit.Clock
	sealer *seal.Sealer
	sender *notify.Sender
	svc    *notify.Service
}

type nopAudit struct{}

func (nopAudit) Record(context.Context, store.AuditRecord) {}

func testSealer(t testing.TB) *seal.Sealer {
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i)
	}
	s, err := seal.New(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newEnv is a SQLite store on a manual clock, a sender and the use cases.
// deny is the sender's deny list (nil: none, so that the loopback receivers
// of the tests are reachable).
func newEnv(t *testing.T, deny []string) *env {
	t.Helper()
	clock := testkit.NewClock(start)
	// A long deadline: under the race detector on a busy machine SQLite is many
	// times slower, and these tests are about delivery, not the store's guard.
	st, err := store.OpenWith(t.Context(), "sqlite://"+filepath.Join(t.TempDir(), "vmgate.db"),
		store.Options{Now: clock.Now, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return newEnvOn(t, st, clock, "replica-1", deny)
}

func newEnvOn(t *testing.T, st store.Store, clock *testkit.Clock, owner string, deny []string) *env {
	t.Helper()
	prefixes, err := notify.ParseCIDRs(deny)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, st: st, clock: clock, sealer: testSealer(t)}
	e.sender = notify.NewSender(notify.SenderConfig{Store: st, Sealer: e.sealer, Owner: owner, Now: clock.Now,
		BaseURL: "https://vmgate.example", Deny: prefixes, Jitter: func() float64 { return 0.5 }, RootCAs: testCAs})
	e.svc = notify.NewService(st, e.sealer, nopAudit{}, e.sender, clock.Now)
	return e
}

func (e *env) target(spec notify.TargetSpec) notify.Target {
	e.t.Helper()
	tg, err := e.svc.Create(e.t.Context(), admin, spec)
	if err != nil {
		e.t.Fatalf("create target %s: %v", spec.Name, err)
	}
	return tg
}

// events writes n events to the outbox, one a millisecond of the clock.
func (e *env) events(n int, kind, severity string) {
	e.t.Helper()
	evs := make([]store.NotifyEvent, n)
	for i := range evs {
		evs[i] = store.NotifyEvent{Kind: kind, Severity: severity, ClusterID: 1, Subject: "event " + strconv.Itoa(i),
			Link: "/fleet", At: e.clock.Now()}
	}
	for len(evs) > 0 { // in writes of 100, as causes write them (a few at a time)
		k := min(len(evs), 100)
		if err := e.st.EnqueueNotifications(e.t.Context(), evs[:k]); err != nil {
			e.t.Fatal(err)
		}
		evs = evs[k:]
	}
}

func (e *env) step() int {
	e.t.Helper()
	n, err := e.sender.Step(e.t.Context())
	if err != nil {
		e.t.Fatalf("step: %v", err)
	}
	return n
}

func (e *env) advance(d time.Duration) { e.clock.Set(e.clock.Now().Add(d)) }

// deliveries returns every delivery in a state ("" all).
func (e *env) deliveries(state string) []notify.Delivery {
	e.t.Helper()
	ds, err := e.svc.Deliveries(e.t.Context(), admin, notify.DeliveryFilter{State: state, Limit: 500})
	if err != nil {
		e.t.Fatal(err)
	}
	return ds
}

// receiver is an HTTP receiver that verifies every webhook signature (against
// its own clock) and records the event ids it took, in order.
type receiver struct {
	srv    *httptest.Server
	secret []byte
	now    func() time.Time

	mu       sync.Mutex
	down     bool
	status   int // answered while down (default 503)
	ids      []string
	paths    []string
	bodies   [][]byte
	headers  []http.Header
	bad      []string
	inFlight map[string]bool
	overlaps []string
}

func newReceiver(t *testing.T, secret string, now func() time.Time) *receiver {
	r := &receiver{secret: []byte(secret), now: now, inFlight: map[string]bool{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	id := req.Header.Get(notify.EventIDHeader)
	r.mu.Lock()
	if r.inFlight[id] {
		r.overlaps = append(r.overlaps, id)
	}
	r.inFlight[id] = true
	down, status := r.down, r.status
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.inFlight, id)
		r.mu.Unlock()
	}()
	if down {
		if status == 0 {
			status = http.StatusServiceUnavailable
		}
		w.WriteHeader(status)
		io.WriteString(w, "down for maintenance")
		return
	}
	if len(r.secret) > 0 {
		if err := notify.Verify(r.secret, req.Header.Get(notify.SignatureHeader), body, r.now(), notify.ReplayWindow); err != nil {
			r.mu.Lock()
			r.bad = append(r.bad, id+": "+err.Error())
			r.mu.Unlock()
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
	}
	r.mu.Lock()
	r.ids = append(r.ids, id)
	r.paths = append(r.paths, req.URL.Path)
	r.bodies = append(r.bodies, body)
	r.headers = append(r.headers, req.Header.Clone())
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) setDown(down bool, status int) {
	r.mu.Lock()
	r.down, r.status = down, status
	r.mu.Unlock()
}

func (r *receiver) got() (ids []string, bodies [][]byte, bad []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids), slices.Clone(r.bodies), slices.Clone(r.bad)
}

// testCAs trusts the tests' own certificate (testCert).
var testCAs, testCert = func() (*x509.CertPool, tls.Certificate) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		panic(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}
}()

// tlsConfig serves testCert.
var tlsConfig = tls.Config{Certificates: []tls.Certificate{testCert}, MinVersion: tls.VersionTLS12}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("body %s: %v", b, err)
	}
	return v
}
