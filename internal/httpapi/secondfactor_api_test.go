package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/apitest"
	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
	"github.com/vmgate/vmgate/internal/fleet"
	"github.com/vmgate/vmgate/internal/seal"
	"github.com/vmgate/vmgate/internal/secondfactor"
	"github.com/vmgate/vmgate/internal/store"
	"github.com/vmgate/vmgate/internal/testkit"
)

// sfEnv is the API wired as cmd/vmgate wires it, second factors included, on a
// manual clock.
type sfEnv struct {
	*testEnv
	clock *testkit.Clock
	sf    *secondfactor.Service
}

func newSFEnv(t *testing.T, policy secondfactor.Policy) *sfEnv {
	t.Helper()
	ctx := context.Background()
	clock := testkit.NewClock(time.Date(2031, 5, 6, 7, 8, 0, 0, time.UTC))
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	trail := audit.New(st, audit.Options{})
	sealer, err := seal.New(bytes.Repeat([]byte{5}, seal.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	au, err := auth.New(ctx, st, auth.Config{Sealer: sealer, Audit: trail.Record, Now: clock.Now, RefusalPause: -1,
		Argon2: auth.Params{Memory: 8, Time: 1, Threads: 1, KeyLen: 32, SaltLen: 16}, PerAddressRate: rate.Inf, PerAddressBurst: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(au.Close)
	sf, err := secondfactor.New(secondfactor.Config{Store: st, Sessions: au, Sealer: sealer, Audit: trail, Now: clock.Now,
		Require: policy, PublicURL: "https://vmgate.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	au.SetSecondStep(sf)
	acc := accounts.New(accounts.Config{Store: st, Auth: au, Audit: trail, StepUp: sf, Now: clock.Now})
	fl, err := fleet.New(ctx, fleet.Config{Store: st, Sealer: sealer, Audit: trail})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fl.Close)
	e := &testEnv{t: t, store: st, auth: au, accounts: acc, trail: trail, fleet: fl,
		sims: map[string]*envSim{}, users: map[string]accounts.User{}, tokens: map[string]string{}}
	cfg := e.apiConfig()
	cfg.SecondFactors = sf
	api, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.api, e.h = api, apitest.Wrap(t, api)
	return &sfEnv{testEnv: e, clock: clock, sf: sf}
}

// tick moves the clock on by d.
func (e *sfEnv) tick(d time.Duration) { e.clock.Set(e.clock.Now().Add(d)) }

// call sends a request with token ("" for none) and returns its status, reason
// and data.
func (e *sfEnv) call(token, method, path, body string) (int, string, json.RawMessage) {
	e.t.Helper()
	w := e.send(bearerReq(method, path, token, body))
	env := envelopeOf(e.t, w)
	var reason struct {
		Reason string `json:"reason"`
	}
	json.Unmarshal(w.Body.Bytes(), &reason)
	return w.Code, reason.Reason, env.Data
}

func (e *sfEnv) must(token, method, path, body string, want int, wantReason string) json.RawMessage {
	e.t.Helper()
	code, reason, data := e.call(token, method, path, body)
	if code != want || reason != wantReason {
		e.t.Fatalf("%s %s: %d %q %s, want %d %q", method, path, code, reason, data, want, wantReason)
	}
	return data
}

// code is the TOTP code of secret now on the env's clock.
func (e *sfEnv) code(secret string) string {
	e.t.Helper()
	c, err := secondfactor.TOTPCode(secret, e.clock.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// password logs in with the password and returns the second step's ticket and
// methods (failing if a token came instead).
func (e *sfEnv) password(email string) (string, []string) {
	e.t.Helper()
	data := e.must("", "POST", "/api/v1/user/login", `{"email":"`+email+`","password":"`+envPassword+`"}`, 200, "")
	var d map[string]json.RawMessage
	json.Unmarshal(data, &d)
	if _, ok := d["token"]; ok {
		e.t.Fatalf("a password alone gave a token: %s", data)
	}
	var step secondStepJSON
	if err := json.Unmarshal(data, &step); err != nil || step.SecondFactor.Ticket == "" {
		e.t.Fatalf("no ticket: %s", data)
	}
	return step.SecondFactor.Ticket, step.SecondFactor.Methods
}

func (e *sfEnv) enrolTOTP(token string) (id, secret string, codes []string) {
	e.t.Helper()
	var p struct {
		ID, Secret, OTPAuthURL string
	}
	json.Unmarshal(e.must(token, "POST", "/api/v1/user/second-factors/totp", `{"name":"phone"}`, 200, ""), &p)
	if p.ID == "" || p.Secret == "" || !strings.HasPrefix(p.OTPAuthURL, "otpauth://totp/vmgate:") {
		e.t.Fatalf("pending TOTP: %+v", p)
	}
	var c recoveryCodesJSON
	json.Unmarshal(e.must(token, "POST", "/api/v1/user/second-factors/totp/"+p.ID+"/confirm",
		`{"code":"`+e.code(p.Secret)+`"}`, 200, ""), &c)
	return p.ID, p.Secret, c.RecoveryCodes
}

func tokenOf(t *testing.T, data json.RawMessage) string {
	t.Helper()
	var d struct {
		Token string `json:"token"`
	}
	json.Unmarshal(data, &d)
	if d.Token == "" {
		t.Fatalf("no token: %s", data)
	}
	return d.Token
}

// TestSecondFactorLoginOverHTTP (docs/security.md item 41): once a TOTP factor
// is confirmed, a right password gives a ticket and never a token; the second
// step takes a TOTP code once (the confirmation's code and a used one are
// refused), a recovery code once, and a ticket dies after 5 wrong answers,
// which count toward the account's throttling; an API token manages no factor.
func TestSecondFactorLoginOverHTTP(t *testing.T) {
	e := newSFEnv(t, secondfactor.RequireNone)
	e.addUser("alice", accounts.RoleUser)
	tok := e.tokens["alice"]
	const email = "alice@example.org"

	// Before a factor: the password logs in, and an API token can be made.
	var api createdToken
	json.Unmarshal(e.must(tok, "POST", "/api/v1/user/tokens", `{"name":"script"}`, 200, ""), &api)
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/api/v1/user/second-factors", ""},
		{"POST", "/api/v1/user/second-factors/totp", `{}`},
		{"POST", "/api/v1/user/second-factors/webauthn/begin", ""},
		{"DELETE", "/api/v1/user/second-factors/abc", ""},
		{"POST", "/api/v1/user/second-factors/verify", `{"totp":"123456"}`},
	} {
		e.must(api.Token, r.method, r.path, r.body, 403, errs_sessionRequired)
	}
	var none struct {
		Factors []factorJSON `json:"factors"`
	}
	json.Unmarshal(e.must(tok, "GET", "/api/v1/user/second-factors", "", 200, ""), &none)
	if len(none.Factors) != 0 {
		t.Fatalf("factors before enrolment: %+v", none)
	}

	// A wrong code does not confirm; the right one does, with 10 recovery codes.
	var p struct{ ID, Secret string }
	json.Unmarshal(e.must(tok, "POST", "/api/v1/user/second-factors/totp", "", 200, ""), &p)
	e.must(tok, "POST", "/api/v1/user/second-factors/totp/"+p.ID+"/confirm", `{"code":"000000"}`, 400, "second_factor_invalid")
	var confirmed recoveryCodesJSON
	confirmCode := e.code(p.Secret)
	json.Unmarshal(e.must(tok, "POST", "/api/v1/user/second-factors/totp/"+p.ID+"/confirm", `{"code":"`+confirmCode+`"}`, 200, ""), &confirmed)
	if len(confirmed.RecoveryCodes) != 10 {
		t.Fatalf("recovery codes: %v", confirmed.RecoveryCodes)
	}
	secret, codes := p.Secret, confirmed.RecoveryCodes
	var list struct {
		Factors []factorJSON `json:"factors"`
		Left    int          `json:"recoveryCodesLeft"`
	}
	raw := e.must(tok, "GET", "/api/v1/user/second-factors", "", 200, "")
	json.Unmarshal(raw, &list)
	if len(list.Factors) != 1 || list.Factors[0].Pending || list.Left != 10 || strings.Contains(string(raw), secret) {
		t.Fatalf("factors: %s", raw)
	}

	// The password alone gives a ticket.
	ticket, methods := e.password(email)
	if strings.Join(methods, ",") != "totp,webauthn,recoveryCode" && strings.Join(methods, ",") != "totp,recoveryCode" {
		t.Fatalf("methods: %v", methods)
	}
	// The confirmation's code was used: refused (same step, nothing moved).
	e.must("", "POST", "/api/v1/user/login/second-factor", `{"ticket":"`+ticket+`","totp":"`+confirmCode+`"}`, 401, "second_factor_invalid")
	e.tick(30 * time.Second)
	c1 := e.code(secret)
	data := e.must("", "POST", "/api/v1/user/login/second-factor", `{"ticket":"`+ticket+`","totp":"`+c1+`"}`, 200, "")
	tok2 := tokenOf(t, data)
	// The ticket is spent; the code is used.
	e.must("", "POST", "/api/v1/user/login/second-factor", `{"ticket":"`+ticket+`","totp":"`+c1+`"}`, 401, "second_factor_invalid")
	ticket, _ = e.password(email)
	e.must("", "POST", "/api/v1/user/login/second-factor", `{"ticket":"`+ticket+`","totp":"`+c1+`"}`, 401, "second_factor_invalid")

	// Five wrong answers kill the ticket; they count as wrong passwords, so the
	// account's logins from this network pause after the fifth. (A login
	// first: its success forgives the failures before.)
	e.tick(30 * time.Second)
	ticket, _ = e.password(email)
	tokenOf(t, e.must("", "POST", "/api/v1/user/login/second-factor", `{"ticket":"`+ticket+`","totp":"`+e.code(secret)+`"}`, 200, ""))
	ticket, _ = e.password(email)
	for range 5 {
		e.must("", "POST", "/api/v1/user/login/second-factor", `{"ticket":"`+ticket+`","totp":"`+e.wrongCode(secret)+`"}`, 401, "second_factor_invalid")
	}
	e.must("", "POST", "/api/v1/user/login", `{"email":"`+email+`","password":"`+envPassword+`"}`, 429, "rate_limited")
	e.tick(2 * time.Second)
	e.tick(30 * time.Second)
	e.must("", "POST", "/api/v1/user/login/second-factor", `{"ticket":"`+ticket+`","totp":"`+e.code(secret)+`"}`, 401, "second_factor_invalid")
	if got, err := e.store.SecondFactorTicketByID(context.Background(), hashOfTicket(ticket)); err == nil {
		t.Fatalf("a ticket with %d wrong answers is still stored", got.Failures)
	}
	if rec := e.lastAuditOf(t, "auth.second_factor_failed"); rec.Reason != "wrong_totp" || rec.Target != "user:"+email {
		t.Fatalf("audit of a wrong code: %+v", rec)
	}

	// A recovery code works once (in any case).
	e.tick(time.Minute)
	ticket, _ = e.password(email)
	tokenOf(t, e.must("", "POST", "/api/v1/user/login/second-factor", `{"ticket":"`+ticket+`","recoveryCode":"`+strings.ToUpper(codes[0])+`"}`, 200, ""))
	ticket, _ = e.password(email)
	e.must("", "POST", "/api/v1/user/login/second-factor", `{"ticket":"`+ticket+`","recoveryCode":"`+codes[0]+`"}`, 401, "second_factor_invalid")
	// An expired ticket is dead.
	e.tick(secondfactor.TicketTTL)
	e.must("", "POST", "/api/v1/user/login/second-factor", `{"ticket":"`+ticket+`","recoveryCode":"`+codes[1]+`"}`, 401, "second_factor_invalid")

	// Garbage tickets are the same 401, before the store is asked.
	for _, bad := range []string{"", "x", strings.Repeat("A", 43), strings.Repeat("é", 30)} {
		body, _ := json.Marshal(map[string]string{"ticket": bad, "totp": "123456"})
		e.must("", "POST", "/api/v1/user/login/second-factor", string(body), 401, "second_factor_invalid")
	}
	e.must("", "POST", "/api/v1/user/login/second-factor", `{"ticket":"x","totp":"1","recoveryCode":"y"}`, 400, "invalid_request")
	e.must("", "GET", "/api/v1/user/login/second-factor/webauthn?ticket=nope", "", 401, "second_factor_invalid")
	e.must(tok2, "GET", "/api/v1/user/me", "", 200, "")
}

// errs_sessionRequired is errs.ReasonSessionRequired as the client reads it.
const errs_sessionRequired = "session_required"

func hashOfTicket(t string) []byte {
	h := sha256.Sum256([]byte(t))
	return h[:]
}

// wrongCode is a 6-digit code that no step within the drift accepts now.
func (e *sfEnv) wrongCode(secret string) string {
	e.t.Helper()
	near := map[string]bool{}
	for _, d := range []time.Duration{-30 * time.Second, 0, 30 * time.Second} {
		c, _ := secondfactor.TOTPCode(secret, e.clock.Now().Add(d))
		near[c] = true
	}
	for i := 0; ; i++ {
		c := fmt.Sprintf("%06d", i)
		if !near[c] {
			return c
		}
	}
}

// lastAuditOf is the newest audit record of action.
func (e *testEnv) lastAuditOf(t *testing.T, action string) store.AuditRecord {
	t.Helper()
	recs, err := e.store.ListAudit(context.Background(), 500, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Action == action {
			return r
		}
	}
	t.Fatalf("no audit record %s", action)
	return store.AuditRecord{}
}

// TestSecondFactorStepUpOverHTTP (docs/security.md item 41): a user with a
// factor makes an API token and removes a factor only with a factor given in
// the last 5 minutes (the login's second step counts); a wrong step-up code is
// refused; an admin's reset removes the factors and is audited.
func TestSecondFactorStepUpOverHTTP(t *testing.T) {
	e := newSFEnv(t, secondfactor.RequireNone)
	e.addUser("root", accounts.RoleAdmin)
	bob := e.addUser("bob", accounts.RoleUser)
	id, secret, _ := e.enrolTOTP(e.tokens["bob"])
	// The enrolment itself is a fresh factor.
	e.must(e.tokens["bob"], "POST", "/api/v1/user/tokens", `{"name":"t1"}`, 200, "")
	e.tick(6 * time.Minute)
	e.must(e.tokens["bob"], "POST", "/api/v1/user/tokens", `{"name":"t2"}`, 403, "second_factor_required")
	e.must(e.tokens["bob"], "DELETE", "/api/v1/user/second-factors/"+id, "", 403, "second_factor_required")
	e.must(e.tokens["bob"], "POST", "/api/v1/user/second-factors/recovery-codes", "", 403, "second_factor_required")
	e.must(e.tokens["bob"], "POST", "/api/v1/user/second-factors/totp", "", 403, "second_factor_required")
	e.must(e.tokens["bob"], "POST", "/api/v1/user/second-factors/webauthn/begin", "", 403, "second_factor_required")
	if rec := e.lastAuditOf(t, "access.denied"); rec.Reason != "second_factor_required" {
		t.Fatalf("denial's audit: %+v", rec)
	}

	// A new login's second step is fresh.
	ticket, _ := e.password("bob@example.org")
	tok := tokenOf(t, e.must("", "POST", "/api/v1/user/login/second-factor", `{"ticket":"`+ticket+`","totp":"`+e.code(secret)+`"}`, 200, ""))
	e.must(tok, "POST", "/api/v1/user/tokens", `{"name":"t2"}`, 200, "")
	e.tick(5 * time.Minute)
	e.must(tok, "POST", "/api/v1/user/tokens", `{"name":"t3"}`, 403, "second_factor_required")
	// A step-up: a wrong code is refused, a right one opens 5 minutes.
	e.must(tok, "POST", "/api/v1/user/second-factors/verify", `{"totp":"`+e.wrongCode(secret)+`"}`, 401, "second_factor_invalid")
	e.must(tok, "POST", "/api/v1/user/second-factors/verify", `{"totp":"`+e.code(secret)+`"}`, 200, "")
	e.must(tok, "POST", "/api/v1/user/tokens", `{"name":"t3"}`, 200, "")
	var fresh recoveryCodesJSON
	json.Unmarshal(e.must(tok, "POST", "/api/v1/user/second-factors/recovery-codes", "", 200, ""), &fresh)
	if len(fresh.RecoveryCodes) != 10 {
		t.Fatalf("new recovery codes: %v", fresh.RecoveryCodes)
	}
	e.must(tok, "DELETE", "/api/v1/user/second-factors/"+id, "", 200, "")
	e.must(tok, "DELETE", "/api/v1/user/second-factors/"+id, "", 404, "not_found")
	// Without a factor the password logs in again.
	e.loginAs("bob@example.org", "test")

	// An admin's reset.
	e.enrolTOTP(e.tokens["bob"])
	e.must(e.tokens["bob"], "DELETE", "/api/v1/users/"+strconv.FormatInt(bob.ID, 10)+"/second-factors", "", 403, "forbidden")
	var reset struct {
		Removed int `json:"removed"`
	}
	json.Unmarshal(e.must(e.tokens["root"], "DELETE", "/api/v1/users/"+strconv.FormatInt(bob.ID, 10)+"/second-factors", "", 200, ""), &reset)
	if reset.Removed != 1 {
		t.Fatalf("reset removed %d", reset.Removed)
	}
	if rec := e.lastAuditOf(t, "second_factor.reset"); rec.Target != "user:"+strconv.FormatInt(bob.ID, 10) || rec.UserID != e.users["root"].ID {
		t.Fatalf("reset's audit: %+v", rec)
	}
	e.loginAs("bob@example.org", "test")
	// A passkey's ceremony begins (the options name the RP) without a credential to finish.
	var begin struct {
		Ticket  string          `json:"ticket"`
		Options json.RawMessage `json:"options"`
	}
	json.Unmarshal(e.must(e.tokens["bob"], "POST", "/api/v1/user/second-factors/webauthn/begin", "", 200, ""), &begin)
	if !strings.Contains(string(begin.Options), `"rp":{"name":"vmgate","id":"vmgate.example.com"}`) {
		t.Fatalf("options: %s", begin.Options)
	}
	e.must(e.tokens["bob"], "POST", "/api/v1/user/second-factors/webauthn/finish",
		`{"ticket":"`+begin.Ticket+`","credential":{"id":"x","type":"public-key"}}`, 400, "invalid_request")
}

// TestRequire2FAOverHTTP: under --require-2fa=all a user without a factor logs
// in but may do nothing except enrol (403 second_factor_enrolment_required);
// once enrolled, everything is open again.
func TestRequire2FAOverHTTP(t *testing.T) {
	e := newSFEnv(t, secondfactor.RequireAll)
	e.addUser("carol", accounts.RoleUser)
	tok := e.tokens["carol"]
	e.must(tok, "GET", "/api/v1/pve/clusters", "", 403, "second_factor_enrolment_required")
	e.must(tok, "POST", "/api/v1/user/tokens", `{"name":"x"}`, 403, "second_factor_enrolment_required")
	e.must(tok, "GET", "/api/v1/user/me", "", 200, "")
	var o struct {
		MustEnrol bool `json:"mustEnrol"`
	}
	json.Unmarshal(e.must(tok, "GET", "/api/v1/user/second-factors", "", 200, ""), &o)
	if !o.MustEnrol {
		t.Fatal("mustEnrol is false")
	}
	e.enrolTOTP(tok)
	e.must(tok, "GET", "/api/v1/pve/clusters", "", 200, "")
	e.must(tok, "POST", "/api/v1/user/tokens", `{"name":"x"}`, 200, "")
}

// TestSecondFactorRoutesNeedAService: without the service the routes are not
// there and login answers as before.
func TestSecondFactorRoutesNeedAService(t *testing.T) {
	api, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range api.routes() {
		if strings.Contains(rt.pattern, "second-factor") {
			t.Errorf("route %s %s without the service", rt.method, rt.pattern)
		}
	}
	_ = http.StatusOK
}

// TestSecondFactorRoutesHeadersAndBodies (docs/security.md item 31) over the
// second factors' routes, which the VM env does not serve: every one answers with
// the security headers, without a token and with an admin's, and refuses a body
// that is not JSON with 415 before it acts.
func TestSecondFactorRoutesHeadersAndBodies(t *testing.T) {
	e := newSFEnv(t, secondfactor.RequireNone)
	root := e.addUser("root", accounts.RoleAdmin)
	vals := routeVals{"id": itoa(root.ID)}
	seen := 0
	for _, rt := range e.api.secondFactorRoutes() {
		key := rt.method + " " + rt.pattern
		path := concrete(rt.pattern, vals)
		for _, user := range []string{"", "root"} {
			r := httptest.NewRequest(rt.method, path, nil)
			if takesBody(rt.method) {
				r = httptest.NewRequest(rt.method, path, strings.NewReader(`{}`))
				r.Header.Set("Content-Type", "text/plain")
			}
			if user != "" {
				r.Header.Set("Authorization", "Bearer "+e.tokens[user])
			}
			w := httptest.NewRecorder()
			e.h.ServeHTTP(w, r)
			checkAPIHeaders(t, key+" as "+strconv.Quote(user), w.Header())
			if takesBody(rt.method) && user != "" {
				seen++
				if env := envelopeOf(t, w); w.Code != 415 || env.Reason != "unsupported_media_type" {
					t.Errorf("%s with a text body: %d %s, want 415", key, w.Code, w.Body)
				}
			}
		}
	}
	if seen < 8 {
		t.Errorf("only %d routes take a body", seen)
	}
}

// ceremonyJSON is the answer of a WebAuthn begin: a ticket and the options.
type ceremonyJSON struct {
	Ticket  string          `json:"ticket"`
	Options json.RawMessage `json:"options"`
}

// TestPasskeysOverHTTP (docs/security.md item 41): a passkey enrolled through
// begin/finish (the first factor: recovery codes) logs in at the second step
// with the ticket's challenge; an assertion made for another origin, one whose
// counter went back (a clone) and one replayed are refused; a passkey's step-up
// opens token creation.
func TestPasskeysOverHTTP(t *testing.T) {
	e := newSFEnv(t, secondfactor.RequireNone)
	e.addUser("dave", accounts.RoleUser)
	tok := e.tokens["dave"]
	key := testkit.NewPasskey("https://vmgate.example.com")

	var begin ceremonyJSON
	json.Unmarshal(e.must(tok, "POST", "/api/v1/user/second-factors/webauthn/begin", "", 200, ""), &begin)
	cred, err := key.Create(begin.Options)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"ticket": begin.Ticket, "name": "yubikey", "credential": json.RawMessage(cred)})
	var fin struct {
		Factor        factorJSON `json:"factor"`
		RecoveryCodes []string   `json:"recoveryCodes"`
	}
	json.Unmarshal(e.must(tok, "POST", "/api/v1/user/second-factors/webauthn/finish", string(body), 200, ""), &fin)
	if fin.Factor.Kind != "webauthn" || fin.Factor.Name != "yubikey" || len(fin.RecoveryCodes) != 10 {
		t.Fatalf("finished: %+v", fin)
	}
	// The ticket of an enrolment is spent.
	e.must(tok, "POST", "/api/v1/user/second-factors/webauthn/finish", string(body), 401, "second_factor_invalid")

	login := func(k *testkit.Passkey) (int, string, json.RawMessage) {
		t.Helper()
		ticket, methods := e.password("dave@example.org")
		if strings.Join(methods, ",") != "webauthn,recoveryCode" {
			t.Fatalf("methods: %v", methods)
		}
		opts := e.must("", "GET", "/api/v1/user/login/second-factor/webauthn?ticket="+ticket, "", 200, "")
		a, err := k.Get(opts)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]any{"ticket": ticket, "webauthn": json.RawMessage(a)})
		return e.call("", "POST", "/api/v1/user/login/second-factor", string(b))
	}
	code, _, data := login(key)
	if code != 200 {
		t.Fatalf("passkey login: %d %s", code, data)
	}
	tok2 := tokenOf(t, data)

	// Another origin (a phishing page relaying the challenge) is refused.
	phish := *key
	phish.Origin = "https://vmgate.example.com.evil.test"
	if code, reason, _ := login(&phish); code != 401 || reason != "second_factor_invalid" {
		t.Fatalf("another origin: %d %s", code, reason)
	}
	// A clone: the same key with its counter back.
	clone := *key
	clone.Counter = 0
	if code, reason, _ := login(&clone); code != 401 || reason != "second_factor_invalid" {
		t.Fatalf("a cloned key: %d %s", code, reason)
	}
	if rec := e.lastAuditOf(t, "auth.second_factor_failed"); rec.Reason != "webauthn_counter" {
		t.Fatalf("the clone's audit: %+v", rec)
	}
	// A replayed assertion: a new ticket's challenge is not the old one's.
	ticket, _ := e.password("dave@example.org")
	opts := e.must("", "GET", "/api/v1/user/login/second-factor/webauthn?ticket="+ticket, "", 200, "")
	a, _ := key.Get(opts)
	b, _ := json.Marshal(map[string]any{"ticket": ticket, "webauthn": json.RawMessage(a)})
	e.must("", "POST", "/api/v1/user/login/second-factor", string(b), 200, "")
	ticket, _ = e.password("dave@example.org")
	e.must("", "GET", "/api/v1/user/login/second-factor/webauthn?ticket="+ticket, "", 200, "")
	b, _ = json.Marshal(map[string]any{"ticket": ticket, "webauthn": json.RawMessage(a)})
	e.must("", "POST", "/api/v1/user/login/second-factor", string(b), 401, "second_factor_invalid")

	// Step-up with the passkey.
	e.tick(6 * time.Minute)
	e.must(tok2, "POST", "/api/v1/user/tokens", `{"name":"late"}`, 403, "second_factor_required")
	var v ceremonyJSON
	json.Unmarshal(e.must(tok2, "POST", "/api/v1/user/second-factors/verify/webauthn", "", 200, ""), &v)
	a, _ = key.Get(v.Options)
	b, _ = json.Marshal(map[string]any{"ticket": v.Ticket, "webauthn": json.RawMessage(a)})
	e.must(tok2, "POST", "/api/v1/user/second-factors/verify", string(b), 200, "")
	e.must(tok2, "POST", "/api/v1/user/tokens", `{"name":"late"}`, 200, "")
}
