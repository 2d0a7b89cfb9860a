package console

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/pve"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/store/storetest"
	"github.com/vmgate/vmgate/internal/vmops"
)

// env is the emulator's dev cluster over HTTPS with a real PVE client, a real
// store (SQLite, or PostgreSQL) holding a user with a session and a grant, and a
// broker whose WebSocket is served by a test server as vmgate's API serves it.
type env struct {
	t       testing.TB
	sim     *pvesim.Cluster
	client  *pve.Client
	dsn     string
	st      store.Store
	svc     *Service
	srv     *httptest.Server
	audit   *auditLog
	pve     *recordingPVE
	user    store.User
	session store.Session
	cluster store.Cluster
	current *term // the console a test case drives
}

type envOpts struct {
	dsn string        // the store; "": a fresh SQLite file
	cfg func(*Config) // tweaks of the broker's configuration
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	// PVE's time at the real pace: a console proxy waits 10 s for its
	// connection, as PVE's does.
	sim := pvesim.DevCluster(pvesim.Options{Speed: 1})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	psrv, err := sim.Serve(ctx, pvesim.ServeOptions{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { psrv.Close() })
	ep := psrv.Endpoints()[0]
	// The broker's PVE token needs VM.Console besides what vmgate's other use
	// cases need (docs/decisions/0104).
	tokenID, secret := "console@pve!gw", "6c0e2f8e-1b7a-4c55-8d1e-3f0a9b2c4d5e"
	if err := sim.AddToken(tokenID, secret, pvesim.TokenOptions{VMPrivileges: []string{"VM.Audit", "VM.Console",
		"VM.PowerMgmt"}}); err != nil {
		t.Fatal(err)
	}
	cl, err := pve.New(pve.Config{Endpoints: []pve.Endpoint{{URL: ep.URL, Fingerprint: ep.Fingerprint}},
		TokenID: tokenID, TokenSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	e := &env{t: t, sim: sim, client: cl, dsn: o.dsn, audit: &auditLog{}, pve: &recordingPVE{PVE: cl}}
	if e.dsn == "" {
		e.dsn = "sqlite://" + filepath.Join(t.TempDir(), "vmgate.db")
	}
	e.st = e.openStore()
	bg := context.Background()
	if e.user, err = e.st.CreateUser(bg, store.User{Email: "ops@example.com", Role: store.RoleUser, PasswordHash: "x"}); err != nil {
		t.Fatal(err)
	}
	e.session = store.Session{ID: "sess-1", UserID: e.user.ID, CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour),
		RotatedAt: time.Now()}
	if err := e.st.CreateSession(bg, e.session); err != nil {
		t.Fatal(err)
	}
	if e.cluster, err = e.st.CreateCluster(bg, store.Cluster{Name: "dev", Endpoints: []store.Endpoint{{URL: ep.URL}},
		TokenID: tokenID, TokenSecretSealed: []byte("sealed")}); err != nil {
		t.Fatal(err)
	}
	e.grant(store.GrantOperator)
	e.svc, e.srv = e.replica(e.st, o.cfg)
	return e
}

func (e *env) openStore() store.Store {
	e.t.Helper()
	st, err := store.OpenWith(context.Background(), e.dsn, store.Options{PollInterval: 20 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { st.Close() })
	return st
}

// replica builds a broker on st and the test server of its WebSocket.
func (e *env) replica(st store.Store, tweak func(*Config)) (*Service, *httptest.Server) {
	cfg := Config{Store: st.(Store), Grants: storeGrants{st},
		Connect: func(context.Context, int64) (PVE, error) { return e.pve, nil },
		Audit:   audit.New(e.audit, audit.Options{})}
	if tweak != nil {
		tweak(&cfg)
	}
	svc, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(svc.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := audit.WithRequest(r.Context(), "192.0.2.8", "req-ws", "test/1")
		c, err := svc.Redeem(ctx, r.URL.Query().Get("ticket"))
		if err != nil {
			e.t.Logf("redeem: %v", err)
			reason := ""
			if ee, ok := errs.As(err); ok {
				reason = ee.Reason
			}
			http.Error(w, reason, statusOf(err))
			return
		}
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			c.Close()
			return
		}
		_ = c.Serve(ctx, ws)
	}))
	e.t.Cleanup(srv.Close)
	return svc, srv
}

func statusOf(err error) int {
	switch errs.KindOf(err) {
	case errs.Unauthenticated:
		return 401
	case errs.Forbidden:
		return 403
	case errs.NotFound:
		return 404
	case errs.RateLimited:
		return 429
	}
	return 502
}

func (e *env) grant(role string) {
	e.t.Helper()
	if _, err := e.st.PutGrant(context.Background(), store.Grant{UserID: e.user.ID, ClusterID: e.cluster.ID, Role: role}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) actor() vmops.Actor {
	return vmops.Actor{UserID: e.user.ID, Email: e.user.Email, Role: e.user.Role}
}

func (e *env) guest(kind vmops.GuestKind, vmid int64) vmops.GuestRef {
	return vmops.GuestRef{ClusterID: e.cluster.ID, Node: "pve1", Kind: kind, VMID: vmid}
}

// ticket opens a console of the guest and answers its ticket.
func (e *env) ticket(kind vmops.GuestKind, vmid int64, typ string) Ticket {
	e.t.Helper()
	t, err := e.svc.Open(e.request(), e.actor(), Request{Guest: e.guest(kind, vmid), Type: typ, SessionID: e.session.ID})
	if err != nil {
		e.t.Fatal(err)
	}
	return t
}

func (e *env) request() context.Context {
	ctx := audit.WithRequest(context.Background(), "192.0.2.7", "req-1", "test/1")
	return audit.WithActor(ctx, e.user.ID, e.user.Email, e.session.ID)
}

// dial connects to srv's WebSocket with ticket; the answer's status when refused.
func dial(t testing.TB, srv *httptest.Server, ticket string) (*websocket.Conn, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/?ticket="+ticket, nil)
	if err != nil {
		if resp != nil {
			return nil, resp.StatusCode
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	c.SetReadLimit(8 << 20)
	return c, 101
}

// recordingPVE is the PVE client, keeping every ticket PVE handed out, so that a
// test can look for them in what the client received.
type recordingPVE struct {
	PVE
	mu      sync.Mutex
	tickets []string
}

func (r *recordingPVE) VNCProxy(ctx context.Context, g pve.Guest) (pve.ConsoleProxy, error) {
	cp, err := r.PVE.VNCProxy(ctx, g)
	r.keep(cp)
	return cp, err
}

func (r *recordingPVE) TermProxy(ctx context.Context, g pve.Guest, serial string) (pve.ConsoleProxy, error) {
	cp, err := r.PVE.TermProxy(ctx, g, serial)
	r.keep(cp)
	return cp, err
}

func (r *recordingPVE) keep(cp pve.ConsoleProxy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cp.Ticket != "" {
		r.tickets = append(r.tickets, cp.Ticket)
	}
}

// leaks fails t when b holds any ticket PVE handed out (docs/security.md item 37).
func (r *recordingPVE) leaks(t testing.TB, b []byte) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tk := range r.tickets {
		if bytes.Contains(b, []byte(tk)) {
			t.Fatalf("PVE's ticket reached the client")
		}
		// Its signature alone must not either.
		if _, sig, ok := strings.Cut(tk, "::"); ok && len(sig) > 16 && bytes.Contains(b, []byte(sig)) {
			t.Fatalf("PVE's ticket's signature reached the client")
		}
	}
}

// storeGrants is the fleet's rule on the store's grants, without its caches:
// an operator grant allows operator and viewer, a viewer grant viewer only.
type storeGrants struct{ st store.Store }

func (g storeGrants) Authorize(ctx context.Context, a fleet.Actor, clusterID int64, need string) (string, error) {
	gr, err := g.st.GrantFor(ctx, a.UserID, clusterID)
	if errs.Is(err, errs.NotFound) {
		return "", errs.E(errs.NotFound, "cluster not found")
	}
	if err != nil {
		return "", err
	}
	if need == store.GrantOperator && gr.Role != store.GrantOperator {
		return "", errs.E(errs.Forbidden, "your grant on this cluster does not allow this")
	}
	return gr.Role, nil
}

func (g storeGrants) Require(ctx context.Context, a fleet.Actor, clusterID int64, need, _ string) error {
	_, err := g.Authorize(ctx, a, clusterID, need)
	return err
}

// RequireGuest is Require: these tests hold no scoped grant (the scoped-grant
// matrix runs on the fleet's own check).
func (g storeGrants) RequireGuest(ctx context.Context, a fleet.Actor, clusterID int64, _ pve.Guest, need, _ string) error {
	return g.Require(ctx, a, clusterID, need, "")
}

// auditLog keeps what the audit trail writes.
type auditLog struct {
	mu   sync.Mutex
	recs []store.AuditRecord
}

func (a *auditLog) AppendAudit(_ context.Context, r store.AuditRecord) (store.AuditRecord, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recs = append(a.recs, r)
	return r, nil
}

func (a *auditLog) QueryAudit(context.Context, store.AuditFilter) ([]store.AuditRecord, error) {
	return nil, errors.New("not listed in tests")
}

func (a *auditLog) of(action string) []store.AuditRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []store.AuditRecord
	for _, r := range a.recs {
		if r.Action == action {
			out = append(out, r)
		}
	}
	return out
}

// term is a client of a terminal console: it keeps every byte received.
type term struct {
	t   testing.TB
	e   *env
	c   *websocket.Conn
	got bytes.Buffer
}

func (tm *term) send(s string) {
	tm.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tm.c.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
		tm.t.Fatal(err)
	}
}

func (tm *term) typeText(s string) { tm.send("0:" + strconv.Itoa(len(s)) + ":" + s) }

// until reads until the bytes received hold want.
func (tm *term) until(want string) {
	tm.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !strings.Contains(tm.got.String(), want) {
		_, b, err := tm.c.Read(ctx)
		if err != nil {
			tm.t.Fatalf("waiting for %q (have %q): %v", want, tm.got.String(), err)
		}
		tm.e.pve.leaks(tm.t, b)
		tm.got.Write(b)
	}
}

// closed reads until the connection closes and answers its close status and reason.
func (tm *term) closed() (websocket.StatusCode, string) {
	tm.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		_, b, err := tm.c.Read(ctx)
		if err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				return ce.Code, ce.Reason
			}
			tm.t.Fatalf("the console did not close: %v", err)
		}
		tm.got.Write(b)
	}
}

// postgres is the DSN of a fresh PostgreSQL schema, or the test skips (fails in CI).
func postgres(t *testing.T) string { t.Helper(); return storetest.FreshSchema(t) }
