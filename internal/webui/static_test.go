package webui

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

var assetLink = regexp.MustCompile(`(?:href|src)="(/static/[^"]+)"`)

// TestStaticFiles: the static files are served under content-hashed names, cached
// for a year as immutable, with an ETag that revalidates to 304, gzip-compressed
// for clients that accept it; other names are 404.
func TestStaticFiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	b := e.browser()
	links := assetLink.FindAllStringSubmatch(b.get("/login").body, -1)
	if len(links) != 3 {
		t.Fatalf("the login page links %d static files, want 3 (icon, style, script)", len(links))
	}
	for _, l := range links {
		path := l[1]
		req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
		resp, err := b.c.Do(req) // the transport asks for gzip and inflates it
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h := resp.Header
		if resp.StatusCode != 200 || h.Get("Cache-Control") != "public, max-age=31536000, immutable" ||
			h.Get("ETag") == "" || len(plain) == 0 {
			t.Fatalf("%s: %d %v", path, resp.StatusCode, h)
		}
		if !strings.Contains(path, strings.Trim(h.Get("ETag"), `"`)) {
			t.Errorf("%s: ETag %s is not the name's hash", path, h.Get("ETag"))
		}
		want := map[string]string{".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}
		for ext, ct := range want {
			if strings.HasSuffix(path, ext) && h.Get("Content-Type") != ct {
				t.Errorf("%s: Content-Type %q", path, h.Get("Content-Type"))
			}
		}

		// Asked explicitly for gzip, the body comes compressed (the CSS and JS).
		req, _ = http.NewRequest("GET", e.srv.URL+path, nil)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err = b.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasSuffix(path, ".svg") {
			if resp.Header.Get("Content-Encoding") != "gzip" || len(raw) >= len(plain) {
				t.Errorf("%s: not compressed (%s, %d of %d bytes)", path, resp.Header.Get("Content-Encoding"), len(raw), len(plain))
			} else if zr, err := gzip.NewReader(bytes.NewReader(raw)); err != nil {
				t.Errorf("%s: %v", path, err)
			} else if got, _ := io.ReadAll(zr); !bytes.Equal(got, plain) {
				t.Errorf("%s: the compressed body differs", path)
			}
		}

		req, _ = http.NewRequest("GET", e.srv.URL+path, nil)
		req.Header.Set("If-None-Match", h.Get("ETag"))
		resp, err = b.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotModified {
			t.Errorf("%s revalidated: %d", path, resp.StatusCode)
		}
	}
	if p := b.get("/static/app.css"); p.status != http.StatusNotFound {
		t.Errorf("an unhashed name: %d", p.status)
	}
}

// TestEveryUIAnswerHasTheSecurityHeaders (docs/security.md items 31, 33): pages, redirects,
// static files and errors all carry the UI's CSP (no 'unsafe-inline' or
// 'unsafe-eval', frame-ancestors 'none') and the other headers; pages are never
// cached.
func TestEveryUIAnswerHasTheSecurityHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	b := e.browser()
	check := func(what string, p page) {
		t.Helper()
		csp := p.header.Get("Content-Security-Policy")
		if csp == "" || strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") ||
			!strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") ||
			!strings.Contains(csp, "style-src 'self'") {
			t.Errorf("%s: CSP %q", what, csp)
		}
		for k, v := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
			"Referrer-Policy": "same-origin", "Cross-Origin-Opener-Policy": "same-origin"} {
			if p.header.Get(k) != v {
				t.Errorf("%s: %s %q", what, k, p.header.Get(k))
			}
		}
		if strings.HasPrefix(p.header.Get("Content-Type"), "text/html") && p.header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: a page with Cache-Control %q", what, p.header.Get("Cache-Control"))
		}
	}
	check("redirect to login", b.get("/"))
	check("login page", b.get("/login"))
	check("not found", b.get("/no/such/page"))
	b.login(adminEmail)
	check("fleet", b.get("/"))
	check("account", b.get("/account"))
	for _, l := range assetLink.FindAllStringSubmatch(b.get("/").body, -1) {
		check(l[1], b.get(l[1]))
	}
}

// TestAPIPathsStayTheAPIs: with the UI mounted, the API's paths (IsAPIPath) are
// still answered by the API (the JSON envelope), never by a UI page.
func TestAPIPathsStayTheAPIs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	b := e.browser()
	for _, path := range []string{"/api/v1", "/api/v1/", "/api/v1/nope", "/api/v1/openapi.json"} {
		p := b.get(path)
		var env struct {
			Code int `json:"code"`
		}
		if !strings.HasPrefix(p.header.Get("Content-Type"), "application/json") || json.Unmarshal([]byte(p.body), &env) != nil {
			t.Errorf("%s: %d %s %q", path, p.status, p.header.Get("Content-Type"), clip(p.body, 200))
		}
	}
	// And the API's own routes outside /api/ stay too.
	if p := b.get("/healthz"); p.status != 200 || !strings.Contains(p.body, `"ok"`) {
		t.Errorf("/healthz: %d %s", p.status, p.body)
	}
}
