package webui

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/auth"
)

// TestAPITokenIsNoCookie (docs/security.md item 32): an API token put into the session
// cookie is no session: the UI sends the request to the log-in page.
func TestAPITokenIsNoCookie(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	tok, err := e.auth.CreateAPIToken(context.Background(), e.users[adminEmail].ID, auth.NewAPIToken{Name: "script"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.auth.Authenticate(context.Background(), tok.Secret); err != nil {
		t.Fatalf("the token itself works: %v", err)
	}
	b := e.browser()
	u, _ := url.Parse(e.srv.URL)
	b.c.Jar.SetCookies(u, []*http.Cookie{{Name: sessionCookie, Value: tok.Secret, Path: "/"}})
	p := b.get("/")
	if p.status != http.StatusSeeOther || !strings.HasPrefix(p.location(), "/login") {
		t.Fatalf("the UI with an API token as its cookie: %d %s", p.status, p.location())
	}
}
