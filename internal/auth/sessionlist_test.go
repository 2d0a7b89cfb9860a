package auth

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vmgate/vmgate/internal/audit"
	"github.com/vmgate/vmgate/internal/errs"
)

// TestSessionListShowsActivity (docs/security.md item 29): a user's live sessions with the
// address and User-Agent of their login, newest first; an ended one is gone.
func TestSessionListShowsActivity(t *testing.T) {
	e := newEnv(t, nil)
	u := e.createUser("alice@example.com", alicePassword, "user")
	ctx := audit.WithRequest(context.Background(), "198.51.100.4", "req-1", "vmgate-cli/1.0 \x07(bell)")
	first, _, err := e.s.Login(ctx, u.Email, alicePassword, "198.51.100.4")
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	second := e.login(u.Email, alicePassword)
	list, err := e.s.Sessions(context.Background(), u.ID)
	if err != nil || len(list) != 2 {
		t.Fatalf("sessions: %v %+v", err, list)
	}
	if list[0].ID != second.SessionID || list[1].ID != first.SessionID {
		t.Errorf("order: %s, %s; want the newest login first", list[0].ID, list[1].ID)
	}
	old := list[1]
	if old.Address != "198.51.100.4" || old.UserAgent != "vmgate-cli/1.0 (bell)" || !old.LastSeenAt.Equal(old.CreatedAt) {
		t.Errorf("first session: %+v", old)
	}
	if err := e.s.Logout(context.Background(), e.authOK(second.Raw)); err != nil {
		t.Fatal(err)
	}
	if list, _ := e.s.Sessions(context.Background(), u.ID); len(list) != 1 || list[0].ID != first.SessionID {
		t.Errorf("after a logout: %+v", list)
	}
	// An absurd User-Agent is kept at 256 bytes.
	long := audit.WithRequest(context.Background(), "198.51.100.4", "req-2", strings.Repeat("é", 300))
	tok, _, err := e.s.Login(long, u.Email, alicePassword, "198.51.100.4")
	if err != nil {
		t.Fatal(err)
	}
	if ua := e.st.session(tok.SessionID).UserAgent; len(ua) > maxUserAgent || !strings.HasPrefix(ua, "éé") {
		t.Errorf("User-Agent kept: %d bytes", len(ua))
	}
}

// TestLastSeenIsWrittenAtMostOncePerInterval (docs/security.md item 29): a session used on every request is
// written to the store once per SeenInterval, not per request, and its
// LastSeenAt follows; a refresh writes it as part of the rotation.
func TestLastSeenIsWrittenAtMostOncePerInterval(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SeenInterval = time.Minute })
	u := e.createUser("alice@example.com", alicePassword, "user")
	tok := e.login(u.Email, alicePassword)
	for i := 0; i < 100; i++ {
		e.authOK(tok.Raw)
		e.clock.Advance(time.Second) // 100 s of use
	}
	e.s.WaitSeen()
	e.st.mu.Lock()
	touches := e.st.touches
	e.st.mu.Unlock()
	if touches < 1 || touches > 2 {
		t.Errorf("100 requests over 100 s wrote the last use %d times, want 1 or 2", touches)
	}
	seen := e.st.session(tok.SessionID).LastSeenAt
	if want := e.clock.Now().Add(-100 * time.Second); !seen.After(want) {
		t.Errorf("LastSeenAt %v, want after the login at %v", seen, want)
	}
	e.clock.Advance(time.Minute)
	next, err := e.refresh(tok.Raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.st.session(next.SessionID).LastSeenAt; !got.Equal(e.clock.Now()) {
		t.Errorf("LastSeenAt after a refresh: %v, want %v", got, e.clock.Now())
	}
}

// TestEndSession (docs/security.md item 29): the owner or an admin ends one session; its
// tokens fail at once, the user's other sessions live on, another user's session
// and an ended one are the same 404, and the end is audited with the actor from
// the context.
func TestEndSession(t *testing.T) {
	e := newEnv(t, nil)
	alice := e.createUser("alice@example.com", alicePassword, "user")
	bob := e.createUser("bob@example.com", bobPassword, "user")
	a1 := e.login(alice.Email, alicePassword)
	a2 := e.login(alice.Email, alicePassword)
	b1 := e.login(bob.Email, bobPassword)

	ctx := audit.WithActor(audit.WithRequest(context.Background(), "203.0.113.5", "req-9", "ua"), alice.ID, alice.Email, a2.SessionID)
	for name, c := range map[string]struct {
		user int64
		sid  string
	}{"bob's session": {alice.ID, b1.SessionID}, "no such session": {alice.ID, "nope"}} {
		err := e.s.EndSession(ctx, c.user, c.sid, WhyEnded)
		if k := wantKind(t, err, errs.NotFound); k.Message != "session not found" {
			t.Errorf("%s: %q", name, k.Message)
		}
	}
	e.authOK(b1.Raw)

	if err := e.s.EndSession(ctx, alice.ID, a1.SessionID, WhyEnded); err != nil {
		t.Fatal(err)
	}
	e.authFails(a1.Raw)
	if _, err := e.refresh(a1.Raw); err == nil {
		t.Error("the ended session's token refreshed")
	}
	e.authOK(a2.Raw)
	if err := e.s.EndSession(ctx, alice.ID, a1.SessionID, WhyEnded); !errs.Is(err, errs.NotFound) {
		t.Errorf("ending it again: %v, want NotFound", err)
	}
	if s := e.st.session(a1.SessionID); s.RevokedWhy != WhyEnded {
		t.Errorf("revoked why %q", s.RevokedWhy)
	}
	recs := e.audit.actions("auth.session_revoked")
	if len(recs) != 1 || recs[0].Target != "session:"+a1.SessionID || recs[0].Result != "ok" ||
		!strings.Contains(recs[0].Params, `"why":"ended"`) {
		t.Errorf("audit: %+v", recs)
	}
}
