package auth

import (
	"context"
	"strings"
	"testing"

	"github.com/vmgate/vmgate/internal/store"
)

// StartSession is the one way into a session whatever the login method (issue 18,
// docs/history.md: auth ready for a second login method): a session started by a
// method that is not a password is a session like Login's — its token
// authenticates, refreshes and logs out; the session keeps the client's address
// and a printable, bounded User-Agent; the start is audited as auth.login naming
// the method. A disabled user gets the one 401 of every failed login, and a call
// without a method or a user starts nothing.
func TestStartSessionOfAnotherMethod(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	alice := e.createUser("alice@example.com", alicePassword, store.RoleUser)
	ctx := context.Background()
	ua := "probe\x00\u202e" + strings.Repeat("é", maxUserAgent)

	tok, err := e.s.StartSession(ctx, alice, Method("sso"), Client{Address: "198.51.100.7", UserAgent: ua})
	if err != nil {
		t.Fatal(err)
	}
	p := e.authOK(tok.Raw)
	if p.UserID != alice.ID || p.SessionID != tok.SessionID || p.Email != alice.Email {
		t.Fatalf("principal %+v", p)
	}
	sess := e.st.session(tok.SessionID)
	if sess.Address != "198.51.100.7" || !strings.HasPrefix(sess.UserAgent, "probe") || len(sess.UserAgent) > maxUserAgent ||
		strings.ContainsAny(sess.UserAgent, "\x00\u202e") {
		t.Fatalf("session %+v", sess)
	}
	recs := e.audit.actions("auth.login")
	if len(recs) != 1 || recs[0].UserID != alice.ID || recs[0].SessionID != tok.SessionID ||
		recs[0].Address != "198.51.100.7" || recs[0].Params != `{"method":"sso"}` {
		t.Fatalf("audit %+v", recs)
	}
	next, err := e.refresh(tok.Raw)
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if err := e.s.Logout(ctx, e.authOK(next.Raw)); err != nil {
		t.Fatalf("logout: %v", err)
	}
	e.authFails(next.Raw)

	// Login goes through the same door, naming its method.
	e.login("alice@example.com", alicePassword)
	if recs := e.audit.actions("auth.login"); len(recs) != 2 || recs[1].Params != `{"method":"password"}` {
		t.Fatalf("audit of the password login %+v", recs)
	}

	alice.Disabled = true
	_, err = e.s.StartSession(ctx, alice, Method("sso"), Client{Address: "198.51.100.7"})
	wantCredentialsError(t, err)
	for _, c := range []struct {
		name   string
		u      store.User
		method Method
	}{
		{"no method", store.User{ID: alice.ID, Email: alice.Email}, ""},
		{"no user", store.User{}, MethodPassword},
	} {
		if _, err := e.s.StartSession(ctx, c.u, c.method, Client{}); err == nil {
			t.Errorf("%s: a session started", c.name)
		}
	}
	if n := len(e.audit.actions("auth.login")); n != 2 {
		t.Fatalf("%d auth.login records after the refusals, want 2", n)
	}
}
