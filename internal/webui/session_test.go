package webui

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/accounts"
	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/auth"
)

// TestSessionCookieAttributes (docs/security.md item 33): every cookie the UI sets — the
// log-in form's CSRF secret, the session, a notice — is HttpOnly,
// SameSite=Strict, Path=/ without Domain, and over TLS Secure with the __Host-
// prefix (so no sibling subdomain or plain-HTTP page can plant one); the session
// token is in no page. A cookie planted under the plain name is not read over
// TLS.
func TestSessionCookieAttributes(t *testing.T) {
	t.Parallel()
	for _, tls := range []bool{false, true} {
		e := newEnv(t, envOptions{tls: tls})
		b := e.browser()
		set := map[string]*http.Cookie{} // by base name, as set
		note := func(p page) {
			for _, c := range (&http.Response{Header: p.header}).Cookies() {
				set[strings.TrimPrefix(c.Name, hostPrefix)] = c
				if c.Value != "" && c.MaxAge >= 0 {
					set[strings.TrimPrefix(c.Name, hostPrefix)+" (set)"] = c
				}
			}
		}
		note(b.get("/login"))
		p := b.post("/login", url.Values{"email": {adminEmail}, "password": {password}}).expect(t, http.StatusSeeOther)
		note(p)
		b.get("/account")
		note(b.post("/account/password", url.Values{"current": {"x"}, "new": {"a"}, "repeat": {"b"}}).expect(t, http.StatusSeeOther))
		note(b.get("/account").expect(t, http.StatusOK)) // shows the notice and deletes it
		for _, base := range []string{loginCookie, sessionCookie, noticeCookie} {
			c := set[base+" (set)"]
			if c == nil {
				t.Fatalf("tls=%v: %s was never set: %v", tls, base, set)
			}
			wantName := base
			if tls {
				wantName = hostPrefix + base
			}
			if c.Name != wantName || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" ||
				c.Secure != tls || c.Domain != "" {
				t.Errorf("tls=%v: cookie %+v", tls, c)
			}
			if d := set[base]; d.Name != wantName || d.Path != "/" || d.Secure != tls {
				t.Errorf("tls=%v: %s deleted as %+v", tls, base, d)
			}
		}
		if c := set[sessionCookie+" (set)"]; c.MaxAge != 0 {
			t.Errorf("tls=%v: the session cookie outlives the browser session: %+v", tls, c)
		}
		// The token is in no page.
		home := b.get("/").expect(t, http.StatusOK)
		if strings.Contains(home.body, b.sessionCookie()) {
			t.Errorf("tls=%v: the session token is in the page", tls)
		}
		if tls {
			// A session cookie under the plain name (planted by a page of a
			// sibling host, or over plain HTTP) is not the session over TLS.
			plain := e.browser()
			u, _ := url.Parse(e.srv.URL)
			plain.c.Jar.SetCookies(u, []*http.Cookie{{Name: sessionCookie, Value: b.sessionCookie(), Path: "/"}})
			if p := plain.get("/"); p.status != http.StatusSeeOther {
				t.Errorf("a plain-named session cookie over TLS: %d", p.status)
			}
		}
	}
}

// TestAPIRefusesTheCookie (docs/security.md item 33): the JSON API authenticates with a
// Bearer token only; the UI's cookie opens nothing there, on a read or a write.
func TestAPIRefusesTheCookie(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	b := e.browser()
	b.login(adminEmail)
	if b.sessionCookie() == "" {
		t.Fatal("no cookie after login")
	}
	for _, rq := range []struct{ method, path string }{
		{"GET", "/api/v1/user/me"},
		{"GET", "/api/v1/pve/clusters"},
		{"POST", "/api/v1/pve/vm/1/pve1/101/start"},
		{"POST", "/api/v1/user/logout"},
		{"POST", "/api/v1/user/refresh"},
	} {
		req, _ := http.NewRequest(rq.method, e.srv.URL+rq.path, nil)
		req.Header.Set("Origin", e.srv.URL)
		resp, err := b.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s with the cookie: %d %s", rq.method, rq.path, resp.StatusCode, body)
		}
	}
	// The session is untouched: the UI still works.
	b.get("/").expect(t, http.StatusOK)
}

// TestStateChangesNeedCSRFAndOrigin (docs/security.md item 33): a POST without the session's
// CSRF token, with another session's token, from another Origin, or without any
// Origin and Sec-Fetch-Site, is refused and changes nothing.
func TestStateChangesNeedCSRFAndOrigin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	b := e.browser()
	b.login(adminEmail)
	other := e.browser()
	other.login(opEmail)
	good := b.csrf

	cases := []struct {
		name   string
		csrf   string
		origin string
		site   string
	}{
		{"no token", "", e.srv.URL, ""},
		{"another session's token", other.csrf, e.srv.URL, ""},
		{"a forged token", strings.Repeat("A", len(good)), e.srv.URL, ""},
		{"another origin", good, "https://evil.example", ""},
		{"another port", good, "http://127.0.0.1:1", ""},
		{"null origin", good, "null", ""},
		{"no origin, cross-site", good, "", "cross-site"},
		{"no origin, no fetch metadata", good, "", ""},
	}
	for _, c := range cases {
		form := url.Values{"csrf": {c.csrf}}
		req, _ := http.NewRequest("POST", e.srv.URL+"/logout", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		if c.site != "" {
			req.Header.Set("Sec-Fetch-Site", c.site)
		}
		p := b.do(req)
		if p.status != http.StatusForbidden {
			t.Errorf("%s: logout answered %d, want 403", c.name, p.status)
		}
		b.get("/").expect(t, http.StatusOK) // still logged in
		b.csrf = good
	}
	// A form without Origin but with Sec-Fetch-Site: same-origin and the token is
	// accepted (browsers that send no Origin on same-origin POSTs).
	req, _ := http.NewRequest("POST", e.srv.URL+"/logout", strings.NewReader(url.Values{"csrf": {good}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	if p := b.do(req); p.status != http.StatusSeeOther || p.location() != "/login" {
		t.Errorf("same-origin logout: %d %s", p.status, p.location())
	}
}

// TestLoginNeedsItsFormToken: the log-in form carries a token bound to a cookie of
// its own, so that another site cannot log a browser into an account it chose.
func TestLoginNeedsItsFormToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	b := e.browser()
	// Without the login page first: no login cookie.
	p := b.post("/login", url.Values{"email": {adminEmail}, "password": {password}, "csrf": {"x"}})
	if p.status != http.StatusForbidden || !strings.Contains(p.body, "expired") || b.sessionCookie() != "" {
		t.Fatalf("login without the form's token: %d, cookie %q", p.status, b.sessionCookie())
	}
	// From another origin, even with the token.
	b.get("/login")
	b.origin = "https://evil.example"
	if p := b.post("/login", url.Values{"email": {adminEmail}, "password": {password}}); p.status != http.StatusForbidden || b.sessionCookie() != "" {
		t.Fatalf("login from another origin: %d", p.status)
	}
}

// TestLoginErrorsAreClear: wrong credentials, an account delayed after wrong
// passwords (with the seconds) and too many attempts from a network each say so;
// none logs in.
func TestLoginErrorsAreClear(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{auth: func(c *auth.Config) { c.FailuresBeforeBackoff = 2; c.BackoffBase = time.Minute }})
	b := e.browser()
	b.get("/login")
	wrong := url.Values{"email": {opEmail}, "password": {"not the password at all"}}
	p := b.post("/login", wrong)
	if p.status != http.StatusUnauthorized || !strings.Contains(p.body, "Wrong e-mail address or password.") {
		t.Fatalf("wrong password: %d\n%s", p.status, p.body)
	}
	if !strings.Contains(p.body, `value="`+opEmail+`"`) {
		t.Error("the e-mail typed is not kept in the form")
	}
	b.post("/login", wrong) // the second failure starts the delay
	p = b.post("/login", url.Values{"email": {opEmail}, "password": {password}})
	if p.status != http.StatusTooManyRequests || !strings.Contains(p.body, "locked for 60 seconds") ||
		p.header.Get("Retry-After") != "60" || b.sessionCookie() != "" {
		t.Fatalf("delayed account: %d Retry-After %q\n%s", p.status, p.header.Get("Retry-After"), p.body)
	}

	e2 := newEnv(t, envOptions{auth: func(c *auth.Config) { c.PerAddressRate = 0.0001; c.PerAddressBurst = 1 }})
	b2 := e2.browser()
	b2.get("/login")
	b2.post("/login", url.Values{"email": {opEmail}, "password": {"not the password at all"}})
	p = b2.post("/login", url.Values{"email": {opEmail}, "password": {password}})
	if p.status != http.StatusTooManyRequests || !strings.Contains(p.body, "Too many attempts. Try again in") {
		t.Fatalf("too many attempts: %d\n%s", p.status, p.body)
	}
}

// TestLoginGoesBackToThePageAsked: a page asked for before logging in is where the
// login ends; anything that is not a path of this site goes to the fleet instead.
func TestLoginGoesBackToThePageAsked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	b := e.browser()
	p := b.get("/account?tab=pw").expect(t, http.StatusSeeOther)
	if p.location() != "/login?next=%2Faccount%3Ftab%3Dpw" {
		t.Fatalf("redirect to %q", p.location())
	}
	b.get(p.location()).expect(t, http.StatusOK)
	p = b.post("/login", url.Values{"email": {adminEmail}, "password": {password}, "next": {"/account?tab=pw"}})
	if p.status != http.StatusSeeOther || p.location() != "/account?tab=pw" {
		t.Fatalf("after login: %d %q", p.status, p.location())
	}
	// Logged in, the log-in page goes on at once, also to a safe next only.
	if p := b.get("/login?next=//evil.example/x"); p.status != http.StatusSeeOther || p.location() != "/" {
		t.Fatalf("login page when logged in: %d %q", p.status, p.location())
	}
}

func TestSafeNext(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                          "/",
		"/":                         "/",
		"/vms?cluster=1&status=run": "/vms?cluster=1&status=run",
		"/tasks/UPID:pve1:0001":     "/tasks/UPID:pve1:0001",
		"//evil.example":            "/",
		"///evil.example":           "/",
		"/\\evil.example":           "/",
		"\\\\evil.example":          "/",
		"https://evil.example/":     "/",
		"http:/evil.example":        "/",
		"javascript:alert(1)":       "/",
		"evil.example":              "/",
		"/%0d%0aSet-Cookie:x":       "/%0d%0aSet-Cookie:x",
		"/\r\nSet-Cookie: x":        "/",
		"/\tx":                      "/",
		"/login":                    "/",
		"/api/v1/user/me":           "/",
		"/api":                      "/",
		"/static/app.css":           "/",
		"/ok#frag":                  "/ok",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLogoutEndsTheSession: after logging out the cookie's token is dead (the
// session ended in auth, not just the cookie deleted), and a page sends to login.
func TestLogoutEndsTheSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	b := e.browser()
	b.login(opEmail)
	raw := b.sessionCookie()
	p := b.post("/logout", nil).expect(t, http.StatusSeeOther)
	if p.location() != "/login" || b.sessionCookie() != "" {
		t.Fatalf("logout: %q, cookie left %q", p.location(), b.sessionCookie())
	}
	if _, err := e.auth.Authenticate(context.Background(), raw); err == nil {
		t.Fatal("the session's token still authenticates after logout")
	}
	if p := b.get("/"); p.status != http.StatusSeeOther || !strings.HasPrefix(p.location(), "/login") {
		t.Fatalf("a page after logout: %d %q", p.status, p.location())
	}
}

// TestCookieSessionEndsLikeAnyOther: the UI's session is an ordinary vmgate
// session: ended by a password change elsewhere, by an admin disabling the user,
// and by the reuse of a rotated token; each ends the UI at once.
func TestCookieSessionEndsLikeAnyOther(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	loggedOut := func(b *browser, why string) {
		t.Helper()
		if p := b.get("/"); p.status != http.StatusSeeOther || !strings.HasPrefix(p.location(), "/login") {
			t.Errorf("%s: the UI still answers %d", why, p.status)
		}
	}

	// A password change in another session ends this one.
	b := e.browser()
	b.login(opEmail)
	tok, _, err := e.acc.Login(ctx, opEmail, password, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.auth.Authenticate(ctx, tok.Raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.acc.ChangePassword(ctx, p, password, password+"-new"); err != nil {
		t.Fatal(err)
	}
	loggedOut(b, "password changed in another session")
	if err := e.acc.ChangePassword(ctx, p, password+"-new", password); err != nil {
		t.Fatal(err)
	}

	// An admin disabling the user ends it.
	b = e.browser()
	b.login(viewerEmail)
	yes := true
	if _, err := e.acc.UpdateUser(ctx, setupAdmin, e.users[viewerEmail].ID, accounts.UserChange{Disabled: &yes}); err != nil {
		t.Fatal(err)
	}
	loggedOut(b, "user disabled")

	// A rotated token presented again revokes the session (reuse detection): the
	// cookie's token refreshed elsewhere, then refreshed again after the grace.
	b = e.browser()
	b.login(opEmail)
	raw := b.sessionCookie()
	if _, err := e.auth.Refresh(ctx, raw, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	loggedOut(b, "token rotated elsewhere")
}

// TestSessionRenewal: once less than half of the token's life is left, a page load
// renews the cookie (a new generation); requests still carrying the old token just
// after get the new one instead of ending the session (long after, the old token
// ends it: TestRotatedCookieRevokesTheSession).
func TestSessionRenewal(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Now()}
	e := newEnv(t, envOptions{clock: clk, auth: func(c *auth.Config) { c.TokenTTL = 10 * time.Minute }})
	b := e.browser()
	b.login(opEmail)
	first := b.sessionCookie()
	b.get("/").expect(t, http.StatusOK)
	if b.sessionCookie() != first {
		t.Fatal("renewed with most of the token's life left")
	}
	clk.Add(6 * time.Minute)
	b.get("/").expect(t, http.StatusOK)
	second := b.sessionCookie()
	if second == first {
		t.Fatal("not renewed past half the token's life")
	}
	// A straggler with the old token, just after: served, and handed the new one.
	old := e.browser()
	u, _ := url.Parse(e.srv.URL)
	old.c.Jar.SetCookies(u, []*http.Cookie{{Name: sessionCookie, Value: first, Path: "/"}})
	old.get("/").expect(t, http.StatusOK)
	if old.sessionCookie() != second {
		t.Fatal("the straggler did not get the renewed token")
	}
	// An expired token is not renewed: log in again.
	clk.Add(11 * time.Minute)
	if p := b.get("/"); p.status != http.StatusSeeOther {
		t.Fatalf("expired token: %d", p.status)
	}
}

// TestRotatedCookieRevokesTheSession (docs/security.md item 7, the UI's path): a thief
// rotates a stolen cookie's token at /user/refresh; when the owner's browser
// presents the old token to the UI, the session is revoked — the thief's new
// token dies too — and auth.token_reuse is audited, exactly as a replay at
// /user/refresh. A token the UI's own renewal replaced is the same once the
// renewal is past: the browser holds the new one, so whoever shows the old one
// is another party. Within auth's grace (a request in flight when the token was
// rotated) the old cookie is refused alone.
func TestRotatedCookieRevokesTheSession(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Now()}
	e := newEnv(t, envOptions{clock: clk, auth: func(c *auth.Config) { c.TokenTTL = 10 * time.Minute }})
	ctx := context.Background()
	u, _ := url.Parse(e.srv.URL)
	// refreshAtAPI is what the thief does with a stolen token: POST /user/refresh.
	refreshAtAPI := func(raw string) string {
		t.Helper()
		req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/user/refresh", nil)
		req.Header.Set("Authorization", "Bearer "+raw)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Data struct {
				Token string `json:"token"`
			} `json:"data"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil || body.Data.Token == "" {
			t.Fatalf("refresh at the API: %d", resp.StatusCode)
		}
		return body.Data.Token
	}
	reuses := func() []audit.Entry {
		t.Helper()
		es, err := e.trail.Query(ctx, audit.Filter{Action: "auth.token_reuse"})
		if err != nil {
			t.Fatal(err)
		}
		return es
	}
	dead := func(what, raw string) {
		t.Helper()
		if _, err := e.auth.Authenticate(ctx, raw); err == nil {
			t.Errorf("%s: the token still authenticates", what)
		}
	}

	// Within the grace: the old cookie is refused, the session lives on.
	b := e.browser()
	b.login(opEmail)
	stolen := b.sessionCookie()
	thief := refreshAtAPI(stolen)
	b.get("/").expect(t, http.StatusSeeOther)
	if _, err := e.auth.Authenticate(ctx, thief); err != nil || len(reuses()) != 0 {
		t.Fatalf("within the grace: the session ended (%v) or a reuse was audited (%d)", err, len(reuses()))
	}

	// Past the grace: the session ends, on every token, and the reuse is audited
	// with the owner's session, the address and where it was seen.
	clk.Add(3 * time.Second)
	p := b.get("/vms")
	if p.status != http.StatusSeeOther || !strings.HasPrefix(p.location(), "/login") || b.sessionCookie() != "" {
		t.Fatalf("the old cookie after the grace: %d %q, cookie %q", p.status, p.location(), b.sessionCookie())
	}
	dead("the thief's token", thief)
	dead("the stolen token", stolen)
	rs := reuses()
	if len(rs) != 1 || rs[0].SessionID == "" || rs[0].UserID != e.users[opEmail].ID || rs[0].Result != "revoked" ||
		rs[0].Address != "127.0.0.1" || rs[0].RequestID == "" || !strings.Contains(rs[0].Params, `"via":"ui"`) {
		t.Fatalf("reuse records %+v", rs)
	}

	// The log-in page, which anyone may open, applies the rule too.
	b = e.browser()
	b.login(opEmail)
	stolen = b.sessionCookie()
	thief = refreshAtAPI(stolen)
	clk.Add(3 * time.Second)
	b.get("/login").expect(t, http.StatusOK)
	dead("the thief's token, after the log-in page", thief)

	// The UI's own renewal: a straggler within renewalKept gets the new token;
	// the old token shown long after is another party's, and ends the session.
	b = e.browser()
	b.login(opEmail)
	first := b.sessionCookie()
	clk.Add(6 * time.Minute)
	b.get("/").expect(t, http.StatusOK)
	second := b.sessionCookie()
	if second == first {
		t.Fatal("not renewed past half the token's life")
	}
	clk.Add(time.Minute)
	old := e.browser()
	old.c.Jar.SetCookies(u, []*http.Cookie{{Name: sessionCookie, Value: first, Path: "/"}})
	old.get("/").expect(t, http.StatusSeeOther)
	dead("the renewed token, after the old one came back", second)
	if len(reuses()) != 3 {
		t.Fatalf("%d reuse records, want 3", len(reuses()))
	}
}

// TestLinkFromAnotherSite: a link from another site arrives without the
// SameSite=Strict cookie; the UI answers with a page that goes on from vmgate
// itself (no script), where the browser sends it.
func TestLinkFromAnotherSite(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	req, _ := http.NewRequest("GET", e.srv.URL+"/account?x=1", nil)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set("Sec-Fetch-Mode", "navigate")
	p := e.browser().do(req)
	if p.status != http.StatusOK || !strings.Contains(p.body, `<meta http-equiv="refresh" content="0;url=/account?x=1">`) {
		t.Fatalf("bounce: %d\n%s", p.status, p.body)
	}
}
