package webui

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/httpapi"
	"github.com/vmgate/vmgate/internal/identity"
	"github.com/vmgate/vmgate/internal/notify"
	"github.com/vmgate/vmgate/internal/operations"
	"github.com/vmgate/vmgate/internal/pvesim"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/secondfactor"
	"github.com/vmgate/vmgate/internal/sse"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/vmops"
)

// setupAdmin and setupActor are an admin's login session as the use cases see it:
// who sets the tests' users and grants up, straight through the use cases.
var (
	setupAdmin = auth.Principal{Role: accounts.RoleAdmin, SessionID: "test-setup"}
	setupActor = fleet.Actor{Role: accounts.RoleAdmin}
)

// The UI's tests run the whole stack as `vmgate server` composes it: the real use
// cases on SQLite, the emulator's dev cluster over HTTPS, httpapi with the UI
// mounted, over real HTTP on loopback.

// password is every test user's password.
const password = "lunar-tulip-granite-47"

// The test users: an admin, an operator and a viewer of the dev cluster, and a
// user without a grant.
const (
	adminEmail  = "alice@example.com"
	opEmail     = "olga@example.com"
	viewerEmail = "victor@example.com"
	nobodyEmail = "nadia@example.com"
)

// clock is a settable time for auth and the UI; it starts at the real time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type envOptions struct {
	speed float64              // the emulator's speed (default 1000)
	tls   bool                 // serve over TLS
	clock *clock               // auth's and the UI's time (default: real)
	auth  func(c *auth.Config) // tweaks of auth's configuration

	requestTimeout time.Duration // httpapi's (default its own)
	pveTimeout     time.Duration // each PVE call's bound (default the PVE client's)
	log            *slog.Logger  // httpapi's request log (default none)
	manualClock    bool          // the emulator's time moves only when a test says (tasks stay running)
	streams        *sse.Limiter  // the event stream caps the UI and the API share (default each its own)
	trustedProxies []string      // httpapi's (default none)
}

type env struct {
	t     testing.TB
	st    store.Store
	auth  *auth.Service
	acc   *accounts.Service
	fleet *fleet.Service
	vms   *vmops.Service
	ops   *operations.Service
	sf    *secondfactor.Service
	trail *audit.Trail
	ui    *UI
	srv   *httptest.Server
	sim   *pvesim.Cluster
	cid   int64
	users map[string]accounts.User
	// notify is the Notifications page's use cases (issue 24).
	notify *notify.Service
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{t: t, st: st, trail: audit.New(st, audit.Options{}), users: map[string]accounts.User{}}
	now := time.Now
	if o.clock != nil {
		now = o.clock.Now
	}
	key := bytes.Repeat([]byte{7}, seal.KeySize)
	sealer, err := seal.New(key)
	if err != nil {
		t.Fatal(err)
	}
	acfg := auth.Config{
		Sealer:          sealer,
		Argon2:          auth.Params{Memory: 8, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16},
		PerAddressRate:  rate.Inf,
		PerAddressBurst: 1,
		Audit:           e.trail.Record, // as the server wires it
		Now:             now,
	}
	if o.auth != nil {
		o.auth(&acfg)
	}
	if e.auth, err = auth.New(ctx, st, acfg); err != nil {
		t.Fatal(err)
	}
	// Second factors, wired as cmd/vmgate wires them (the route-table tests
	// cover their routes too).
	sf, err := secondfactor.New(secondfactor.Config{Store: st, Sessions: e.auth, Sealer: sealer, Audit: e.trail, Now: now,
		PublicURL: "https://vmgate.example.test"})
	if err != nil {
		t.Fatal(err)
	}
	e.auth.SetSecondStep(sf)
	e.sf = sf
	e.acc = accounts.New(accounts.Config{Store: st, Auth: e.auth, Audit: e.trail, StepUp: sf})
	if e.fleet, err = fleet.New(ctx, fleet.Config{Store: st, Sealer: sealer, Audit: e.trail, PVETimeout: o.pveTimeout}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.fleet.Close)
	e.vms = vmops.New(vmops.Config{Store: st, Clients: e.fleet, Audit: e.trail, PollInterval: 20 * time.Millisecond,
		HAGrace: 10 * time.Second, Sweep: 50 * time.Millisecond})
	t.Cleanup(e.vms.Close)
	e.ops = operations.New(e.vms, operations.Config{Store: st, Audit: e.trail})
	t.Cleanup(e.ops.Close)

	speed := o.speed
	if speed == 0 {
		speed = 1000
	}
	e.sim = pvesim.DevCluster(pvesim.Options{Speed: speed, ClusterName: "dev", ManualClock: o.manualClock})
	sctx, cancel := context.WithCancel(ctx)
	ssrv, err := e.sim.Serve(sctx, pvesim.ServeOptions{TLS: true})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); ssrv.Close() })
	ep := ssrv.Endpoints()[0]
	tokenID, secret, _ := strings.Cut(e.sim.DevToken(), "=")
	cl, err := e.fleet.Register(ctx, fleet.ClusterSpec{Name: "dev", Endpoints: []string{ep.URL}, TokenID: tokenID,
		TokenSecret: secret, TLSFingerprint: ep.Fingerprint})
	if err != nil {
		t.Fatal(err)
	}
	e.cid = cl.ID
	for _, u := range []struct{ email, role, grant string }{
		{adminEmail, accounts.RoleAdmin, ""},
		{opEmail, accounts.RoleUser, fleet.GrantOperator},
		{viewerEmail, accounts.RoleUser, fleet.GrantViewer},
		{nobodyEmail, accounts.RoleUser, ""},
	} {
		nu, err := e.acc.CreateUser(ctx, setupAdmin, accounts.NewUser{Email: u.email, Password: password, Role: u.role})
		if err != nil {
			t.Fatal(err)
		}
		e.users[u.email] = nu
		if u.grant != "" {
			if _, err := e.fleet.PutGrant(ctx, setupActor, nu.ID, e.cid, u.grant); err != nil {
				t.Fatal(err)
			}
		}
	}

	e.notify = notify.NewService(st, sealer, e.trail, notify.NewSender(notify.SenderConfig{Store: st, Sealer: sealer, Owner: "ui-test"}), now)
	e.ui, err = New(Config{Sessions: e.auth, Accounts: e.acc, Fleet: e.fleet, VMs: e.vms, Operations: e.ops, Audit: e.trail,
		SecondFactors: e.sf,
		Notifications: e.notify,
		Secret:        key, TokenTTL: acfg.TokenTTL, Status: httpapi.StatusOf, Now: now,
		NoteCaller: httpapi.NoteCaller, Streams: o.streams,
		Identity: identity.NewAdmin(st.(identity.AdminStore), e.acc, e.trail.Record)})
	if err != nil {
		t.Fatal(err)
	}
	api, err := httpapi.New(httpapi.Config{Sessions: e.auth, Accounts: e.acc, Audit: e.trail, Store: st,
		Fleet: e.fleet, VMs: e.vms, UI: e.ui, Now: now, RequestTimeout: o.requestTimeout, Logger: o.log, Streams: o.streams,
		TrustedProxies: o.trustedProxies})
	if err != nil {
		t.Fatal(err)
	}
	if o.tls {
		// Through the server's own wrapper, which sets HSTS on every TLS answer.
		e.srv = httptest.NewUnstartedServer(httpapi.NewHTTPServer("", api, nil).Handler)
		e.srv.StartTLS()
	} else {
		e.srv = httptest.NewServer(api)
	}
	t.Cleanup(e.srv.Close)
	return e
}

// browser is a client that behaves as a browser does for the UI: a cookie jar,
// the Origin of the site on every POST, no automatic redirects (the tests look at
// them).
type browser struct {
	e      *env
	c      *http.Client
	origin string // sent as Origin on POST; "" sends none
	csrf   string // the CSRF token of the last page read
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	c := *e.srv.Client() // a client of its own: the server's is shared
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &browser{e: e, c: &c, origin: e.srv.URL}
}

// page is an answer the browser got.
type page struct {
	status int
	header http.Header
	body   string
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (b *browser) do(req *http.Request) page {
	b.e.t.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		b.e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	p := page{status: resp.StatusCode, header: resp.Header, body: string(body)}
	if m := csrfField.FindStringSubmatch(p.body); m != nil {
		b.csrf = m[1]
	}
	return p
}

// get loads a page as a navigation would.
func (b *browser) get(path string) page {
	b.e.t.Helper()
	req, err := http.NewRequest("GET", b.e.srv.URL+path, nil)
	if err != nil {
		b.e.t.Fatal(err)
	}
	req.Header.Set("Sec-Fetch-Mode", "navigate")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	return b.do(req)
}

// post sends a form; the CSRF token of the last page read is added unless the form
// has one.
func (b *browser) post(path string, form url.Values) page {
	b.e.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf"]; !ok && b.csrf != "" {
		form.Set("csrf", b.csrf)
	}
	req, err := http.NewRequest("POST", b.e.srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		b.e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Mode", "navigate")
	if b.origin != "" {
		req.Header.Set("Origin", b.origin)
	}
	return b.do(req)
}

// login logs in through the form with the test users' password and checks that
// it worked.
func (b *browser) login(email string) {
	b.e.t.Helper()
	b.loginWith(email, password)
}

func (b *browser) loginWith(email, pw string) {
	b.e.t.Helper()
	b.get("/login")
	p := b.post("/login", url.Values{"email": {email}, "password": {pw}})
	if p.status != http.StatusSeeOther {
		b.e.t.Fatalf("login as %s: %d\n%s", email, p.status, p.body)
	}
	b.get("/") // a page of the session, for its CSRF token
}

// sessionCookie is the session cookie the jar holds for the site ("" when none).
func (b *browser) sessionCookie() string {
	u, _ := url.Parse(b.e.srv.URL)
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == sessionCookie || c.Name == sessionCookieTLS {
			return c.Value
		}
	}
	return ""
}

// location is a redirect's target.
func (p page) location() string { return p.header.Get("Location") }

// expect checks the status of an answer.
func (p page) expect(t testing.TB, status int) page {
	t.Helper()
	if p.status != status {
		t.Fatalf("status %d, want %d\n%s", p.status, status, clip(p.body, 3000))
	}
	return p
}
