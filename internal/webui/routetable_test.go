package webui

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The UI's route-table tests: each loops over UI.routes(), the one list of the
// UI's routes, so a route added later is in the loop without anyone adding it
// (a new path wildcard the loop has no value for fails it, naming the route).

// wildcard is a ServeMux path wildcard: {name} or {name...}; {$} is none.
var wildcard = regexp.MustCompile(`\{([a-zA-Z]+)(?:\.\.\.)?\}`)

// uiPath turns a route's pattern into a path of the test environment: the dev
// cluster, its VM 100 on pve1, a task that does not exist, the user without
// grants, and ids of nothing for the rest. nothing names a VM and a node that do
// not exist, for an action that would act: it must find nothing to act on (an
// action refused before it acts is what the loops look at).
func (e *env) uiPath(t *testing.T, pattern string, asset string, nothing bool) string {
	t.Helper()
	node, vmid := "pve1", "100"
	if nothing {
		node, vmid = "pve9", "999999"
	}
	vals := map[string]string{
		"clusterId": strconv.FormatInt(e.cid, 10),
		"node":      node,
		"vmid":      vmid,
		"taskId":    "UPID:pve1:0000FFFF:0000FFFF:00000001:qmstart:100:vmgate@pve!gw:",
		"id":        strconv.FormatInt(e.users[nobodyEmail].ID, 10),
		"sid":       "no-such-session",
		"tid":       "no-such-token",
		"fid":       "no-such-factor",
		"file":      asset,
		"target":    "nt_0000000000000000",
	}
	path := strings.ReplaceAll(pattern, "{$}", "")
	return wildcard.ReplaceAllStringFunc(path, func(w string) string {
		name := wildcard.FindStringSubmatch(w)[1]
		v, ok := vals[name]
		if !ok {
			t.Fatalf("route %s: no test value for the wildcard {%s}: add one to uiPath", pattern, name)
		}
		return v
	})
}

// checkUIHeaders fails unless h carries every security header of a UI answer
// (docs/security.md items 31, 33), with HSTS exactly when the answer came over TLS.
func checkUIHeaders(t *testing.T, what string, h http.Header, tls bool) {
	t.Helper()
	csp := h.Get("Content-Security-Policy")
	if csp == "" || strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") ||
		!strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("%s: Content-Security-Policy %q", what, csp)
	}
	for _, k := range []string{"X-Frame-Options", "Referrer-Policy", "Cross-Origin-Resource-Policy", "X-Content-Type-Options"} {
		if h.Get(k) == "" {
			t.Errorf("%s: no %s", what, k)
		}
	}
	if h.Get("X-Frame-Options") != "DENY" || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("%s: X-Frame-Options %q, X-Content-Type-Options %q", what, h.Get("X-Frame-Options"),
			h.Get("X-Content-Type-Options"))
	}
	if hsts := h.Get("Strict-Transport-Security"); (hsts != "") != tls || tls && !strings.Contains(hsts, "max-age=") {
		t.Errorf("%s: Strict-Transport-Security %q over TLS %v", what, hsts, tls)
	}
}

// request builds a request as a browser sends it: a navigation for a GET, a form
// with this site's Origin for a POST.
func (b *browser) request(method, path string, form url.Values) *http.Request {
	b.e.t.Helper()
	var req *http.Request
	var err error
	if method == http.MethodPost {
		req, err = http.NewRequest(method, b.e.srv.URL+path, strings.NewReader(form.Encode()))
		if err == nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", b.e.srv.URL)
		}
	} else {
		req, err = http.NewRequest(method, b.e.srv.URL+path, nil)
	}
	if err != nil {
		b.e.t.Fatal(err)
	}
	req.Header.Set("Sec-Fetch-Mode", "navigate")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	return req
}

// TestSecurityHeadersOnEveryUIRoute (docs/security.md item 31): every route of the UI's
// table — as a stranger (the redirect to log in, the script's 401), as an admin
// (the page, the redirect after an action, the error page), and for a form
// refused for its CSRF token — and the UI's 404, a method no route has, a form
// too large, a form of the wrong type, a static file and a forwarded address a
// trusted proxy garbled, each answers with the CSP, X-Frame-Options,
// Referrer-Policy, Cross-Origin-Resource-Policy and nosniff headers, and with
// HSTS exactly over TLS.
func TestSecurityHeadersOnEveryUIRoute(t *testing.T) {
	t.Parallel()
	for _, tls := range []bool{false, true} {
		e := newEnv(t, envOptions{tls: tls, trustedProxies: []string{"127.0.0.1/32", "::1/128"}})
		admin := e.browser()
		admin.login(adminEmail)
		asset := strings.TrimPrefix(assetLink.FindStringSubmatch(admin.get("/").body)[1], "/static/")
		routes := e.ui.routes()
		if len(routes) < 40 {
			t.Fatalf("only %d UI routes: is Operations wired into the environment?", len(routes))
		}
		scheme := map[bool]string{false: "http", true: "https"}[tls]
		for _, rt := range routes {
			path := e.uiPath(t, rt.pattern, asset, false)
			key := scheme + " " + rt.method + " " + rt.pattern
			// A stranger's page load, and a script's request (401 alone).
			stranger := e.browser()
			p := stranger.do(stranger.request(rt.method, path, url.Values{}))
			checkUIHeaders(t, key+" as a stranger ("+strconv.Itoa(p.status)+")", p.header, tls)
			req := stranger.request(rt.method, path, url.Values{})
			req.Header.Set("Sec-Fetch-Mode", "cors")
			p = stranger.do(req)
			checkUIHeaders(t, key+" from a stranger's script ("+strconv.Itoa(p.status)+")", p.header, tls)
			// The admin, with the session's CSRF token: the page, or the action on
			// nothing (ids that do not exist). Logging out is left for last.
			if rt.pattern != "/logout" {
				b := e.browser()
				b.login(adminEmail)
				acted := path
				if rt.method == http.MethodPost {
					acted = e.uiPath(t, rt.pattern, asset, true)
				}
				p = b.do(b.request(rt.method, acted, url.Values{"csrf": {b.csrf}}))
				checkUIHeaders(t, key+" as the admin ("+strconv.Itoa(p.status)+")", p.header, tls)
			}
			if rt.method == http.MethodPost {
				p = admin.do(admin.request(rt.method, path, url.Values{"csrf": {"forged"}}))
				checkUIHeaders(t, key+" with a forged CSRF token ("+strconv.Itoa(p.status)+")", p.header, tls)
			}
		}
		for _, c := range []struct {
			what, method, path, body, ctype string
			header                          [2]string
		}{
			{"no such page", "GET", "/no/such/page", "", "", [2]string{}},
			{"a method no route has", "PUT", "/login", "", "", [2]string{}},
			{"a method no route has", "DELETE", "/vms", "", "", [2]string{}},
			{"a form too large", "POST", "/account/password", "csrf=" + strings.Repeat("x", maxForm+1),
				"application/x-www-form-urlencoded", [2]string{}},
			{"a form of the wrong type", "POST", "/account/password", "{}", "application/json", [2]string{}},
			{"a static file", "GET", "/static/" + asset, "", "", [2]string{}},
			{"a static file that is not there", "GET", "/static/nope.css", "", "", [2]string{}},
			{"a forwarded address garbled", "GET", "/", "", "", [2]string{"X-Forwarded-For", "not an address"}},
			{"the log-in page", "GET", "/login?next=/vms", "", "", [2]string{}},
		} {
			req, _ := http.NewRequest(c.method, e.srv.URL+c.path, strings.NewReader(c.body))
			if c.ctype != "" {
				req.Header.Set("Content-Type", c.ctype)
			}
			req.Header.Set("Origin", e.srv.URL)
			if c.header[0] != "" {
				req.Header.Set(c.header[0], c.header[1])
			}
			p := admin.do(req)
			checkUIHeaders(t, scheme+" "+c.what+" "+c.method+" "+c.path+" ("+strconv.Itoa(p.status)+")", p.header, tls)
		}
		p := admin.post("/logout", nil)
		checkUIHeaders(t, scheme+" logging out ("+strconv.Itoa(p.status)+")", p.header, tls)
	}
}

// TestEveryUIPostNeedsCSRFAndOrigin (docs/security.md item 33): every POST of the UI's
// table, sent by a logged-in admin (who may do anything), is refused with 403
// before its handler runs — the audit trail does not move — when the form lacks
// the session's CSRF token, carries another session's, comes from another
// Origin, or carries no Origin and says it is cross-site; the log-in form is
// refused without its own token and from another Origin. The loop is over
// UI.routes(), so a POST added later is in it.
func TestEveryUIPostNeedsCSRFAndOrigin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	admin := e.browser()
	admin.login(adminEmail)
	other := e.browser()
	other.login(opEmail)
	head := func() int64 {
		t.Helper()
		es, err := e.trail.List(ctx, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			return 0
		}
		return es[0].ID
	}
	cases := []struct {
		name   string
		csrf   func() string
		origin string // "" sends none
		site   string // Sec-Fetch-Site
		want   *regexp.Regexp
	}{
		{"without the CSRF token", func() string { return "" }, e.srv.URL, "same-origin", regexp.MustCompile(`has expired or did not come from vmgate`)},
		{"with another session's token", func() string { return other.csrf }, e.srv.URL, "same-origin", regexp.MustCompile(`has expired or did not come from vmgate`)},
		{"with a forged token", func() string { return strings.Repeat("A", len(admin.csrf)) }, e.srv.URL, "same-origin", regexp.MustCompile(`has expired or did not come from vmgate`)},
		{"from another origin", func() string { return admin.csrf }, "https://evil.example", "cross-site", regexp.MustCompile(`sent from another site`)},
		{"from another port", func() string { return admin.csrf }, "http://127.0.0.1:1", "same-site", regexp.MustCompile(`sent from another site`)},
		{"from a null origin", func() string { return admin.csrf }, "null", "cross-site", regexp.MustCompile(`sent from another site`)},
		{"without an origin, cross-site", func() string { return admin.csrf }, "", "cross-site", regexp.MustCompile(`sent from another site`)},
		{"without an origin or fetch metadata", func() string { return admin.csrf }, "", "", regexp.MustCompile(`sent from another site`)},
	}
	posts := 0
	for _, rt := range e.ui.routes() {
		if rt.method != http.MethodPost {
			continue
		}
		posts++
		path := e.uiPath(t, rt.pattern, "", false)
		for _, c := range cases {
			csrf := c.csrf()
			form := url.Values{}
			if csrf != "" {
				form.Set("csrf", csrf)
			}
			if rt.pattern == "/login" {
				form.Set("email", adminEmail)
				form.Set("password", password)
				if c.origin == e.srv.URL {
					form.Del("csrf") // the log-in form's token is another: a session's is no token for it
				}
			}
			before := head()
			req := admin.request(http.MethodPost, path, form)
			req.Header.Del("Origin")
			req.Header.Del("Sec-Fetch-Site")
			if c.origin != "" {
				req.Header.Set("Origin", c.origin)
			}
			if c.site != "" {
				req.Header.Set("Sec-Fetch-Site", c.site)
			}
			p := admin.do(req)
			if p.status != http.StatusForbidden || (!strings.HasPrefix(rt.pattern, "/login") && !c.want.MatchString(p.body)) {
				t.Errorf("POST %s %s: %d, want 403 (%s)\n%s", rt.pattern, c.name, p.status, c.want, clip(p.body, 400))
			}
			if after := head(); after != before {
				t.Errorf("POST %s %s: the audit trail moved from %d to %d: the handler acted", rt.pattern, c.name, before, after)
			}
			admin.get("/").expect(t, http.StatusOK) // still logged in: nothing ended the session
		}
	}
	if posts < 20 {
		t.Fatalf("only %d POST routes in the loop", posts)
	}
}
