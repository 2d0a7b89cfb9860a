package identity

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/oauth2"

	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/errs"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/store/storetest"
)

var t0 = time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)

// fakeSessions records the sessions a login method hands over (auth.Service's
// StartSession is the real one; its rules are auth's tests').
type fakeSessions struct {
	mu      sync.Mutex
	started []store.User
	methods []auth.Method
}

func (f *fakeSessions) StartSession(_ context.Context, u store.User, m auth.Method, _ auth.Client) (auth.Token, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u.Disabled {
		return auth.Token{}, errs.E(errs.Unauthenticated, "invalid credentials")
	}
	f.started = append(f.started, u)
	f.methods = append(f.methods, m)
	return auth.Token{Raw: "session-of-" + u.Email, ExpiresAt: t0.Add(time.Hour)}, nil
}

func (f *fakeSessions) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.started)
}

type allowAll struct{}

func (allowAll) RequireAdmin(context.Context, auth.Principal, string) error   { return nil }
func (allowAll) RequireSession(context.Context, auth.Principal, string) error { return nil }

type env struct {
	st       Store
	svc      *Service
	op       *testOP
	sessions *fakeSessions
	mu       sync.Mutex
	audit    []store.AuditRecord
}

// engines runs fn on SQLite and on PostgreSQL (storetest: skipped loudly when
// there is none, failed in CI).
func engines(t *testing.T, fn func(t *testing.T, dsn func(t *testing.T) string)) {
	t.Run("sqlite", func(t *testing.T) {
		fn(t, func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "t.db") })
	})
	t.Run("postgres", func(t *testing.T) { fn(t, func(t *testing.T) string { return storetest.FreshSchema(t) }) })
}

// testStore is the store as the tests use it: Store, and what they set up with.
type testStore interface {
	AdminStore
	CreateUser(ctx context.Context, u store.User) (store.User, error)
	CreateCluster(ctx context.Context, c store.Cluster) (store.Cluster, error)
	PutGrant(ctx context.Context, g store.Grant) (store.Grant, error)
	UserGrants(ctx context.Context, userID int64) ([]store.Grant, error)
}

func openStore(t *testing.T, dsn string) testStore {
	t.Helper()
	st, err := store.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st.(testStore)
}

func newEnv(t *testing.T, st Store) *env {
	t.Helper()
	e := &env{st: st, op: newTestOP(t), sessions: &fakeSessions{}}
	e.svc = e.service(t, e.op)
	return e
}

// service is a Service of the env's store for provider op.
func (e *env) service(t *testing.T, op *testOP) *Service {
	t.Helper()
	svc, err := New(Config{Issuer: op.srv.URL, ClientID: "vmgate", ClientSecret: "s3cret",
		RedirectURL: "https://vmgate.example/auth/oidc/callback", Store: e.st, Sessions: e.sessions, Guard: allowAll{},
		Audit: func(_ context.Context, r store.AuditRecord) {
			e.mu.Lock()
			e.audit = append(e.audit, r)
			e.mu.Unlock()
		},
		Now: func() time.Time { return t0 }, LoginsPerNetwork: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func (e *env) lastAudit(action string) store.AuditRecord {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := len(e.audit) - 1; i >= 0; i-- {
		if e.audit[i].Action == action {
			return e.audit[i]
		}
	}
	return store.AuditRecord{}
}

// claims are an ID token's claims that pass every check, for nonce.
func (e *env) claims(nonce string) jwt.MapClaims {
	return jwt.MapClaims{"iss": e.op.srv.URL, "sub": "alice-sub", "aud": "vmgate", "exp": t0.Add(5 * time.Minute).Unix(),
		"iat": t0.Unix(), "nonce": nonce, "email": "alice@example.com", "email_verified": true, "name": "Alice",
		"groups": []string{"ops"}}
}

// login runs a whole login through svc and op: StartLogin, the provider's
// authorization, FinishLogin from the same browser.
func login(t *testing.T, svc *Service, op *testOP) (Finished, error) {
	t.Helper()
	const browser = "browser-cookie-value-0123456789"
	to, err := svc.StartLogin(context.Background(), Begin{Browser: browser, Address: "192.0.2.1", Next: "/vms"})
	if err != nil {
		t.Fatalf("start login: %v", err)
	}
	code, state := op.authorize(t, to)
	return svc.FinishLogin(context.Background(), Callback{State: state, Code: code, Browser: browser,
		Client: auth.Client{Address: "192.0.2.1"}})
}

// TestIDTokenChecks (docs/security.md item 40): every ID token that fails a check
// is refused with the one 401 sso_failed, its cause in the audit record, and no
// session; the token that passes them all logs the user in.
func TestIDTokenChecks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, openStore(t, "sqlite://"+filepath.Join(t.TempDir(), "t.db")))
	otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		make func(nonce string) string
		want error // nil: accepted
	}{
		{"accepted", func(n string) string { return e.op.sign(t, e.claims(n)) }, nil},
		{"wrong audience", func(n string) string { c := e.claims(n); c["aud"] = "another-client"; return e.op.sign(t, c) }, ErrAudience},
		{"expired", func(n string) string {
			c := e.claims(n)
			c["exp"] = t0.Add(-time.Minute).Unix()
			return e.op.sign(t, c)
		}, ErrExpired},
		{"second issuer", func(n string) string {
			c := e.claims(n)
			c["iss"] = "https://second-issuer.example"
			return e.op.sign(t, c)
		}, ErrIssuer},
		{"tampered signature", func(n string) string {
			parts := strings.Split(e.op.sign(t, e.claims(n)), ".")
			sig := []byte(parts[2])
			sig[10] ^= 'A' ^ 'B'
			if sig[10] == parts[2][10] {
				sig[10] = 'C'
			}
			return parts[0] + "." + parts[1] + "." + string(sig)
		}, ErrIDToken},
		{"tampered claims", func(n string) string {
			parts := strings.Split(e.op.sign(t, e.claims(n)), ".")
			c := e.claims(n)
			c["sub"] = "mallory-sub"
			forged, _ := jwt.NewWithClaims(jwt.SigningMethodRS256, c).SigningString()
			return strings.Split(forged, ".")[0] + "." + strings.Split(forged, ".")[1] + "." + parts[2]
		}, ErrIDToken},
		{"signed by another key under the provider's kid", func(n string) string {
			tok := jwt.NewWithClaims(jwt.SigningMethodRS256, e.claims(n))
			tok.Header["kid"] = "k1" // the provider's kid (never rotated in this test)
			s, _ := tok.SignedString(otherKey)
			return s
		}, ErrIDToken},
		{"unsigned (alg none)", func(n string) string {
			s, _ := jwt.NewWithClaims(jwt.SigningMethodNone, e.claims(n)).SignedString(jwt.UnsafeAllowNoneSignatureType)
			return s
		}, ErrIDToken},
		{"azp of another client", func(n string) string { c := e.claims(n); c["azp"] = "another-client"; return e.op.sign(t, c) }, ErrAuthorizedParty},
		{"several audiences without azp", func(n string) string {
			c := e.claims(n)
			c["aud"] = []string{"vmgate", "another-client"}
			return e.op.sign(t, c)
		}, ErrAuthorizedParty},
		{"iat in the future", func(n string) string {
			c := e.claims(n)
			c["iat"] = t0.Add(5 * time.Minute).Unix()
			return e.op.sign(t, c)
		}, ErrIssuedAt},
		{"iat too old", func(n string) string { c := e.claims(n); c["iat"] = t0.Add(-time.Hour).Unix(); return e.op.sign(t, c) }, ErrIssuedAt},
		{"no iat", func(n string) string { c := e.claims(n); delete(c, "iat"); return e.op.sign(t, c) }, ErrIssuedAt},
		{"another login's nonce", func(string) string { return e.op.sign(t, e.claims("the nonce of another login")) }, ErrNonce},
		{"no nonce", func(n string) string { c := e.claims(n); delete(c, "nonce"); return e.op.sign(t, c) }, ErrNonce},
		{"empty subject", func(n string) string { c := e.claims(n); c["sub"] = ""; return e.op.sign(t, c) }, ErrSubject},
		{"at_hash of another access token", func(n string) string {
			c := e.claims(n)
			c["at_hash"] = base64.RawURLEncoding.EncodeToString([]byte("0123456789abcdef"))
			return e.op.sign(t, c)
		}, ErrAccessTokenHash},
	}
	for _, c := range cases {
		e.op.setIDToken(c.make)
		before := e.sessions.count()
		f, err := login(t, e.svc, e.op)
		if c.want == nil {
			if err != nil || f.Token.Raw != "session-of-alice@example.com" || f.Next != "/vms" {
				t.Errorf("%s: %+v %v", c.name, f, err)
			}
			continue
		}
		ee, ok := errs.As(err)
		if !ok || ee.Kind != errs.Unauthenticated || ee.Reason != errs.ReasonSSOFailed || !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want 401 sso_failed caused by %v", c.name, err, c.want)
			continue
		}
		if e.sessions.count() != before {
			t.Errorf("%s: a session was started", c.name)
		}
		if rec := e.lastAudit("auth.sso_failed"); !strings.Contains(rec.Reason, c.want.Error()) || rec.Result != "denied" {
			t.Errorf("%s: audit %+v", c.name, rec)
		}
	}
}

// TestLoginStateIsSingleUseAndBound (docs/security.md item 40): a callback
// replayed (its state was taken), one from another browser, one naming another
// issuer (RFC 9207 mix-up), an ID token that carries the nonce of a login that
// already finished (replayed nonce), and a provider's refusal are all refused;
// PKCE's verifier reaches the token endpoint and matches the challenge.
func TestLoginStateIsSingleUseAndBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, openStore(t, "sqlite://"+filepath.Join(t.TempDir(), "t.db")))
	ctx := context.Background()
	var lastNonce string
	e.op.setIDToken(func(n string) string { lastNonce = n; return e.op.sign(t, e.claims(n)) })

	const browser = "browser-cookie-value-0123456789"
	to, err := e.svc.StartLogin(ctx, Begin{Browser: browser, Address: "192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	code, state := e.op.authorize(t, to)
	cb := Callback{State: state, Code: code, Browser: browser}
	if _, err := e.svc.FinishLogin(ctx, cb); err != nil {
		t.Fatalf("first callback: %v", err)
	}
	challenge, _ := url.Parse(to)
	if v := e.op.lastVerifier(); v == "" || s256(v) != challenge.Query().Get("code_challenge") {
		t.Errorf("the token endpoint got verifier %q for challenge %q", v, challenge.Query().Get("code_challenge"))
	}
	if _, err := e.svc.FinishLogin(ctx, cb); !errors.Is(err, ErrUnknownState) {
		t.Errorf("replayed callback: %v", err)
	}

	// The nonce of the finished login, in the ID token of a new one.
	used := lastNonce
	e.op.setIDToken(func(string) string { return e.op.sign(t, e.claims(used)) })
	if _, err := login(t, e.svc, e.op); !errors.Is(err, ErrNonce) {
		t.Errorf("replayed nonce: %v", err)
	}
	e.op.setIDToken(func(n string) string { return e.op.sign(t, e.claims(n)) })

	for _, c := range []struct {
		name   string
		change func(*Callback)
		want   error
	}{
		{"another browser", func(c *Callback) { c.Browser = "another-browser-cookie-value-000" }, ErrOtherBrowser},
		{"no binding cookie", func(c *Callback) { c.Browser = "" }, ErrOtherBrowser},
		{"mix-up: iss names another issuer", func(c *Callback) { c.Issuer = "https://evil.example" }, ErrIssuerMismatch},
		{"the provider refused", func(c *Callback) { c.Code, c.Error = "", "access_denied" }, ErrProviderRefused},
		{"an unknown state", func(c *Callback) { c.State = "made-up-state" }, ErrUnknownState},
	} {
		to, err := e.svc.StartLogin(ctx, Begin{Browser: browser, Address: "192.0.2.1"})
		if err != nil {
			t.Fatal(err)
		}
		code, state := e.op.authorize(t, to)
		cb := Callback{State: state, Code: code, Browser: browser}
		c.change(&cb)
		if _, err := e.svc.FinishLogin(ctx, cb); !errors.Is(err, c.want) || errs.KindOf(err) != errs.Unauthenticated {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}

	// A login left at the provider past LoginTTL is gone.
	to, _ = e.svc.StartLogin(ctx, Begin{Browser: browser, Address: "192.0.2.1"})
	code, state = e.op.authorize(t, to)
	late := e.service(t, e.op)
	late.cfg.Now = func() time.Time { return t0.Add(11 * time.Minute) }
	if _, err := late.FinishLogin(ctx, Callback{State: state, Code: code, Browser: browser}); !errors.Is(err, ErrUnknownState) {
		t.Errorf("a login past its time: %v", err)
	}
}

func s256(verifier string) string { return oauth2.S256ChallengeFromVerifier(verifier) }

// TestUsersAreIssuerAndSubject: the first login creates the user (no password,
// role user, the claimed e-mail); the next finds it by issuer and subject even
// when the e-mail changed. A password user's e-mail claimed by an SSO login, and
// the same e-mail at a second issuer, are other users: never found by e-mail.
func TestUsersAreIssuerAndSubject(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, dsn func(t *testing.T) string) {
		st := openStore(t, dsn(t))
		e := newEnv(t, st)
		ctx := context.Background()
		email := "alice@example.com"
		e.op.setIDToken(func(n string) string { c := e.claims(n); c["email"] = email; return e.op.sign(t, c) })
		first, err := login(t, e.svc, e.op)
		if err != nil {
			t.Fatal(err)
		}
		u, err := st.UserByID(ctx, first.User.ID)
		if err != nil || u.Email != "alice@example.com" || u.PasswordHash != "" || u.Role != store.RoleUser || u.Nickname != "Alice" {
			t.Fatalf("created user: %+v %v", u, err)
		}
		email = "alice.new@example.com"
		again, err := login(t, e.svc, e.op)
		if err != nil || again.User.ID != first.User.ID {
			t.Fatalf("second login: %+v %v, want user %d", again, err, first.User.ID)
		}

		// A password user with the e-mail the provider claims.
		pw, err := st.CreateUser(ctx, store.User{Email: "bob@example.com", PasswordHash: "$argon2id$x", Role: store.RoleAdmin})
		if err != nil {
			t.Fatal(err)
		}
		e.op.setIDToken(func(n string) string {
			c := e.claims(n)
			c["sub"], c["email"] = "bob-sub", "bob@example.com"
			return e.op.sign(t, c)
		})
		bob, err := login(t, e.svc, e.op)
		if err != nil || bob.User.ID == pw.ID || !strings.HasSuffix(bob.User.Email, ".invalid") {
			t.Fatalf("SSO login claiming a password user's e-mail: %+v %v (password user %d)", bob, err, pw.ID)
		}

		// The same subject and e-mail at a second issuer.
		second := newTestOP(t)
		svc2 := e.service(t, second)
		second.setIDToken(func(n string) string {
			c := e.claims(n)
			c["iss"], c["email"] = second.srv.URL, "alice.new@example.com"
			return second.sign(t, c)
		})
		other, err := login(t, svc2, second)
		if err != nil || other.User.ID == first.User.ID {
			t.Fatalf("second issuer: %+v %v, want another user than %d", other, err, first.User.ID)
		}
		ids, err := st.UserIdentities(ctx, other.User.ID)
		if err != nil || len(ids) != 1 || ids[0].Issuer != second.srv.URL || ids[0].Subject != "alice-sub" {
			t.Fatalf("identities of the second issuer's user: %+v %v", ids, err)
		}

		// A disabled user is refused, and keeps what they had.
		u, _ = st.UserByID(ctx, first.User.ID)
		u.Disabled = true
		if _, err := st.UpdateUser(ctx, u); err != nil {
			t.Fatal(err)
		}
		e.op.setIDToken(func(n string) string { return e.op.sign(t, e.claims(n)) })
		if _, err := login(t, e.svc, e.op); errs.KindOf(err) != errs.Unauthenticated {
			t.Fatalf("a disabled user's login: %v", err)
		}
		for _, m := range e.sessions.methods {
			if m != auth.MethodOIDC {
				t.Errorf("a session started with method %q", m)
			}
		}
	})
}

// TestGroupMappingsFollowTheGroups (docs/security.md item 43): at each login the
// grants a mapping gave follow the groups — added, raised, removed — and the
// admin role a mapping gave goes with its group; grants and an admin role given by
// hand stay, and a mapped grant an admin changed by hand becomes theirs.
func TestGroupMappingsFollowTheGroups(t *testing.T) {
	t.Parallel()
	engines(t, func(t *testing.T, dsn func(t *testing.T) string) {
		st := openStore(t, dsn(t))
		e := newEnv(t, st)
		ctx := context.Background()
		var clusters []int64
		for _, name := range []string{"c1", "c2", "c3"} {
			c, err := st.CreateCluster(ctx, store.Cluster{Name: name, Endpoints: []store.Endpoint{{URL: "https://" + name + ".example:8006"}},
				TokenID: "root@pam!vmgate", TokenSecretSealed: []byte("sealed")})
			if err != nil {
				t.Fatal(err)
			}
			clusters = append(clusters, c.ID)
		}
		c1, c2, c3 := clusters[0], clusters[1], clusters[2]
		if _, err := st.CreateUser(ctx, store.User{Email: "root@example.com", PasswordHash: "$argon2id$x", Role: store.RoleAdmin}); err != nil {
			t.Fatal(err)
		}
		m := NewAdmin(st, allowAll{}, nil)
		admin := auth.Principal{UserID: 1, Role: store.RoleAdmin, SessionID: "s"}
		ops, err := m.Create(ctx, admin, MappingInput{Group: "ops", Role: store.RoleUser,
			Grants: []GrantInput{{ClusterID: c1, Role: store.GrantOperator}, {ClusterID: c2, Role: store.GrantViewer}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Create(ctx, admin, MappingInput{Group: "leads", Role: store.RoleAdmin,
			Grants: []GrantInput{{ClusterID: c2, Role: store.GrantOperator}}}); err != nil {
			t.Fatal(err)
		}
		groups := []string{"ops"}
		e.op.setIDToken(func(n string) string { c := e.claims(n); c["groups"] = groups; return e.op.sign(t, c) })
		grants := func(uid int64) map[int64]string {
			t.Helper()
			gs, err := st.UserGrants(ctx, uid)
			if err != nil {
				t.Fatal(err)
			}
			out := map[int64]string{}
			for _, g := range gs {
				out[g.ClusterID] = g.Role
			}
			return out
		}
		expect := func(step string, want map[int64]string, role string) int64 {
			t.Helper()
			f, err := login(t, e.svc, e.op)
			if err != nil {
				t.Fatalf("%s: login: %v", step, err)
			}
			got := grants(f.User.ID)
			if len(got) != len(want) {
				t.Errorf("%s: grants %v, want %v", step, got, want)
			}
			for c, r := range want {
				if got[c] != r {
					t.Errorf("%s: grants %v, want %v", step, got, want)
				}
			}
			if u, _ := st.UserByID(ctx, f.User.ID); u.Role != role {
				t.Errorf("%s: role %s, want %s", step, u.Role, role)
			}
			return f.User.ID
		}
		uid := expect("ops", map[int64]string{c1: store.GrantOperator, c2: store.GrantViewer}, store.RoleUser)
		// An admin gives c3 by hand.
		if _, err := st.PutGrant(ctx, store.Grant{UserID: uid, ClusterID: c3, Role: store.GrantViewer}); err != nil {
			t.Fatal(err)
		}
		groups = []string{"ops", "leads"}
		expect("ops and leads: the strongest role per cluster, admin",
			map[int64]string{c1: store.GrantOperator, c2: store.GrantOperator, c3: store.GrantViewer}, store.RoleAdmin)
		groups = []string{"ops"}
		expect("leads left: its admin role and raise go", map[int64]string{c1: store.GrantOperator, c2: store.GrantViewer,
			c3: store.GrantViewer}, store.RoleUser)
		// An admin lowers the mapped grant on c1 by hand: it is theirs now.
		if _, err := st.PutGrant(ctx, store.Grant{UserID: uid, ClusterID: c1, Role: store.GrantViewer}); err != nil {
			t.Fatal(err)
		}
		groups = []string{}
		expect("no group: mapped grants go, the hand-given stay", map[int64]string{c1: store.GrantViewer, c3: store.GrantViewer},
			store.RoleUser)
		// An admin role given by hand is not taken by a login.
		u, _ := st.UserByID(ctx, uid)
		u.Role = store.RoleAdmin
		if _, err := st.UpdateUser(ctx, u); err != nil {
			t.Fatal(err)
		}
		expect("hand-given admin stays", map[int64]string{c1: store.GrantViewer, c3: store.GrantViewer}, store.RoleAdmin)
		// A deleted mapping's grants go at the next login.
		groups = []string{"ops"}
		expect("ops again", map[int64]string{c1: store.GrantViewer, c2: store.GrantViewer, c3: store.GrantViewer}, store.RoleAdmin)
		if err := m.Delete(ctx, admin, ops.ID); err != nil {
			t.Fatal(err)
		}
		expect("ops's mapping deleted", map[int64]string{c1: store.GrantViewer, c3: store.GrantViewer}, store.RoleAdmin)
	})
}

// TestCLIHandoff (RFC 8252): a login the CLI started ends at its loopback
// redirect with a one-time code and its state; the code and the verifier of its
// challenge give a session once; a wrong verifier or a used code get nothing.
// Only a loopback redirect by IP literal is taken.
func TestCLIHandoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, openStore(t, "sqlite://"+filepath.Join(t.TempDir(), "t.db")))
	ctx := context.Background()
	e.op.setIDToken(func(n string) string { return e.op.sign(t, e.claims(n)) })
	const browser = "browser-cookie-value-0123456789"
	cliLogin := func(challenge string) string {
		t.Helper()
		to, err := e.svc.StartLogin(ctx, Begin{Browser: browser, Address: "192.0.2.1", CLIRedirect: "http://127.0.0.1:41234/callback",
			CLIChallenge: challenge, CLIState: "cli-state"})
		if err != nil {
			t.Fatal(err)
		}
		code, state := e.op.authorize(t, to)
		f, err := e.svc.FinishLogin(ctx, Callback{State: state, Code: code, Browser: browser})
		if err != nil || f.Token.Raw != "" {
			t.Fatalf("CLI login: %+v %v", f, err)
		}
		u, err := url.Parse(f.CLIRedirect)
		if err != nil || u.Host != "127.0.0.1:41234" || u.Query().Get("state") != "cli-state" || u.Query().Get("code") == "" {
			t.Fatalf("CLI redirect %q", f.CLIRedirect)
		}
		return u.Query().Get("code")
	}
	verifier := strings.Repeat("v", 50)
	started := e.sessions.count()
	code := cliLogin(s256(verifier))
	if e.sessions.count() != started {
		t.Fatal("a session started before the CLI exchanged its code")
	}
	if _, _, err := e.svc.Exchange(ctx, code, strings.Repeat("w", 50), auth.Client{}); errs.KindOf(err) != errs.Unauthenticated {
		t.Fatalf("a wrong verifier: %v", err)
	}
	if _, _, err := e.svc.Exchange(ctx, code, verifier, auth.Client{}); errs.KindOf(err) != errs.Unauthenticated {
		t.Fatalf("a code already tried: %v", err)
	}
	code = cliLogin(s256(verifier))
	tok, u, err := e.svc.Exchange(ctx, code, verifier, auth.Client{})
	if err != nil || tok.Raw == "" || u.Email != "alice@example.com" {
		t.Fatalf("exchange: %+v %+v %v", tok, u, err)
	}
	if _, _, err := e.svc.Exchange(ctx, code, verifier, auth.Client{}); errs.KindOf(err) != errs.Unauthenticated {
		t.Fatalf("a used code: %v", err)
	}
	for _, bad := range []string{"http://localhost:41234/cb", "https://127.0.0.1:41234/cb", "http://127.0.0.1/cb",
		"http://192.0.2.1:41234/cb", "http://127.0.0.1:41234/cb?x=1", "http://user@127.0.0.1:41234/cb"} {
		_, err := e.svc.StartLogin(ctx, Begin{Browser: browser, Address: "192.0.2.1", CLIRedirect: bad, CLIChallenge: s256(verifier)})
		if errs.KindOf(err) != errs.Invalid {
			t.Errorf("redirect %s: %v", bad, err)
		}
	}
}

// TestLoginsUnderWayAreCapped: one network starts LoginsPerNetwork logins a
// minute, and the store keeps MaxLogins at most; past either, 429 sso_busy.
func TestLoginsUnderWayAreCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, openStore(t, "sqlite://"+filepath.Join(t.TempDir(), "t.db")))
	ctx := context.Background()
	svc := e.service(t, e.op)
	svc.cfg.LoginsPerNetwork, svc.cfg.MaxLogins = 3, 5
	start := func(addr string) error {
		_, err := svc.StartLogin(ctx, Begin{Browser: "browser-cookie-value-0123456789", Address: addr})
		return err
	}
	for i := range 3 {
		if err := start("192.0.2.1"); err != nil {
			t.Fatalf("login %d: %v", i, err)
		}
	}
	if err := start("192.0.2.1"); errs.KindOf(err) != errs.RateLimited {
		t.Fatalf("a fourth login from one network: %v", err)
	}
	for _, addr := range []string{"192.0.2.2", "192.0.2.3"} {
		if err := start(addr); err != nil {
			t.Fatalf("from %s: %v", addr, err)
		}
	}
	if err := start("192.0.2.4"); errs.KindOf(err) != errs.RateLimited {
		t.Fatalf("a sixth login under way: %v", err)
	}
}

// TestMappedAdminRoleKeepsTheLastAdmin: a mapped admin role whose group went stays
// while its user is vmgate's only enabled admin (accounts' last_admin rule), and
// goes at the next login once another admin exists.
func TestMappedAdminRoleKeepsTheLastAdmin(t *testing.T) {
	t.Parallel()
	st := openStore(t, "sqlite://"+filepath.Join(t.TempDir(), "t.db"))
	e := newEnv(t, st)
	ctx := context.Background()
	admin := auth.Principal{UserID: 1, Role: store.RoleAdmin, SessionID: "s"}
	if _, err := NewAdmin(st, allowAll{}, nil).Create(ctx, admin, MappingInput{Group: "leads", Role: store.RoleAdmin}); err != nil {
		t.Fatal(err)
	}
	groups := []string{"leads"}
	e.op.setIDToken(func(n string) string { c := e.claims(n); c["groups"] = groups; return e.op.sign(t, c) })
	role := func() string {
		t.Helper()
		f, err := login(t, e.svc, e.op)
		if err != nil {
			t.Fatal(err)
		}
		u, err := st.UserByID(ctx, f.User.ID)
		if err != nil {
			t.Fatal(err)
		}
		return u.Role
	}
	if r := role(); r != store.RoleAdmin {
		t.Fatalf("in leads: %s", r)
	}
	groups = nil
	if r := role(); r != store.RoleAdmin {
		t.Fatalf("the last admin lost the role: %s", r)
	}
	if _, err := st.CreateUser(ctx, store.User{Email: "root@example.com", PasswordHash: "$argon2id$x", Role: store.RoleAdmin}); err != nil {
		t.Fatal(err)
	}
	if r := role(); r != store.RoleUser {
		t.Fatalf("with another admin: %s", r)
	}
}

// TestKeyRotationIsFollowed: the provider's keys are fetched once and kept; after
// the provider rotates its key (a new kid), the next login's token verifies: the
// key set is fetched again for the kid it does not know.
func TestKeyRotationIsFollowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, openStore(t, "sqlite://"+filepath.Join(t.TempDir(), "t.db")))
	e.op.setIDToken(func(n string) string { return e.op.sign(t, e.claims(n)) })
	for range 2 {
		if _, err := login(t, e.svc, e.op); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.op.fetches(); n != 1 {
		t.Fatalf("the keys were fetched %d times for two logins, want once", n)
	}
	e.op.rotate(t, "k2")
	if _, err := login(t, e.svc, e.op); err != nil {
		t.Fatalf("after the rotation: %v", err)
	}
	if n := e.op.fetches(); n != 2 {
		t.Fatalf("the keys were fetched %d times, want twice", n)
	}
}

// TestLinkedIdentityLogsIntoItsUser: an admin links the provider's identity to a
// password user; its next sign-on logs into that user, not a new one.
func TestLinkedIdentityLogsIntoItsUser(t *testing.T) {
	t.Parallel()
	st := openStore(t, "sqlite://"+filepath.Join(t.TempDir(), "t.db"))
	e := newEnv(t, st)
	ctx := context.Background()
	bob, err := st.CreateUser(ctx, store.User{Email: "bob@example.com", PasswordHash: "$argon2id$x", Role: store.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	admin := NewAdmin(st, allowAll{}, nil)
	p := auth.Principal{UserID: 1, Role: store.RoleAdmin, SessionID: "s"}
	if _, err := admin.Link(ctx, p, bob.ID, e.op.srv.URL, "bob-sub"); err != nil {
		t.Fatal(err)
	}
	e.op.setIDToken(func(n string) string {
		c := e.claims(n)
		c["sub"], c["email"] = "bob-sub", "bob.other@example.com"
		return e.op.sign(t, c)
	})
	f, err := login(t, e.svc, e.op)
	if err != nil || f.User.ID != bob.ID {
		t.Fatalf("the linked identity's sign-on: %+v %v, want user %d", f, err, bob.ID)
	}
	ids, err := admin.Identities(ctx, p, bob.ID)
	if err != nil || len(ids) != 1 || ids[0].Email != "bob.other@example.com" {
		t.Fatalf("bob's identities after the sign-on: %+v %v", ids, err)
	}
	if _, err := admin.Link(ctx, p, bob.ID, e.op.srv.URL, ""); errs.KindOf(err) != errs.Invalid {
		t.Fatalf("an empty subject: %v", err)
	}
	if _, err := admin.Link(ctx, p, 999, e.op.srv.URL, "x"); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("an unknown user: %v", err)
	}
}
